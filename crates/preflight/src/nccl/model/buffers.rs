//! The bytes one connection registers: data buffers per protocol, control MRs in whole pages,
//! QP and CQ rings.

use serde::Serialize;

use super::connections::Direction;
use super::{
    Inputs, CTS_FIFO_BYTES, IB_MAX_REQUESTS, MAX_QPS, MLX5_CQE, MLX5_RECV_WQE, MLX5_SEND_WQE, RECV_COMPLETIONS_BYTES,
    SEND_COMPLETIONS_BYTES,
};
use memlock_core::gdr::GdrMode;

/// Bytes of one term: charged to VmPin (checked against the memlock limit) and taken from host
/// memory (MemAvailable, the cgroup).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Bytes {
    pub memlock: u64,
    pub host: u64,
}

impl Bytes {
    pub(super) fn scale(self, n: u64) -> Self {
        Bytes { memlock: self.memlock.saturating_mul(n), host: self.host.saturating_mul(n) }
    }
    pub(super) fn plus(self, o: Self) -> Self {
        Bytes { memlock: self.memlock.saturating_add(o.memlock), host: self.host.saturating_add(o.host) }
    }
}

/// Pages a registration of `size` bytes at `offset` from a page-aligned start pins: ib_umem_get
/// charges the page span (torvalds/linux drivers/infiniband/core/umem.c), as NCCL's own cache
/// rounds it (net_ib/reg.cc ncclIbRegMrDmaBufInternal2).
pub(super) fn span_pages(offset: u64, size: u64, page: u64) -> u64 {
    if size == 0 {
        return 0;
    }
    let page = page.max(1);
    offset.saturating_add(size).div_ceil(page) - offset / page
}

/// The data buffers of one dedicated (ring or tree) connection, registered one protocol at a time
/// (net.cc sendProxyConnect / recvProxyConnect): host buffers from one cudaHostAlloc bank, GPU
/// buffers from one device bank, each MR its page span unless NCCL's MR cache finds it inside an
/// earlier one of the same bank (net_ib/reg.cc).
pub(super) fn data_buffers(i: &Inputs, dir: Direction, on_gpu: bool) -> Bytes {
    let page = i.page();
    let sizes = [i.buffsize_ll, i.buffsize_ll128, i.buffsize_simple];
    // Send: LL always on the host ("p != NCCL_PROTO_LL && useGdr"); receive: all or nothing.
    let device = |p: usize| on_gpu && !(dir == Direction::Send && p == 0);
    let mut total = Bytes::default();
    for bank_on_gpu in [false, true] {
        let mut offset = 0;
        let mut mrs: Vec<(u64, u64)> = Vec::new();
        for (p, size) in sizes.iter().enumerate() {
            if device(p) != bank_on_gpu {
                continue;
            }
            let start = offset / page;
            let pages = span_pages(offset, *size, page);
            offset = offset.saturating_add(*size);
            if mrs.iter().any(|(s, n)| start >= *s && start.saturating_add(pages) <= s.saturating_add(*n)) {
                continue;
            }
            mrs.push((start, pages));
            let bytes = pages.saturating_mul(page);
            total = total.plus(match (bank_on_gpu, i.gdr) {
                (false, _) => Bytes { memlock: bytes, host: bytes },
                (true, GdrMode::Peermem) => Bytes { memlock: bytes, host: 0 },
                (true, _) => Bytes::default(),
            });
        }
    }
    total
}

/// Control MRs of one IB connection on one device, each registered without the cache (ibv_reg_mr
/// in net_ib/connect.cc): the sender's GIN scratchpad (8 B), CTS FIFO (128 KiB) and completion
/// shadow (8 KiB); the receiver's CTS FIFO shadow (128 KiB), completion records (40 KiB) and,
/// with GPUDirect flush, a flush word (an int). They live inside the page-aligned comm structure
/// at offsets we do not compute (they follow struct ncclIbNetCommBase), so the FIFOs and records
/// are counted as not starting on a page boundary: one page more than their size. The words never
/// straddle a page.
pub(super) fn control_pages(i: &Inputs, dir: Direction) -> u64 {
    let page = i.page();
    let unaligned = |size: u64| size.div_ceil(page) + 1;
    match dir {
        Direction::Send => 1 + unaligned(CTS_FIFO_BYTES) + unaligned(SEND_COMPLETIONS_BYTES),
        Direction::Recv => unaligned(CTS_FIFO_BYTES) + unaligned(RECV_COMPLETIONS_BYTES) + u64::from(i.gdr_flush),
    }
}

/// The queue buffers of one IB connection on one device, pinned by the kernel when mlx5 creates
/// them (rdma-core providers/mlx5: create_cq, mlx5_calc_sq_size, mlx5_calc_rq_size; sizes from
/// net_ib/connect.cc): a CQ of NET_IB_MAX_REQUESTS x QPs entries (send) or twice that (receive),
/// rounded up to a power of two after adding one, 64 B each; per QP a send queue of 2 x 256 WRs of
/// 256 B (both sides) and, on the receive side, a receive queue of 256 WRs of 16 B, each rounded
/// to a power of two; on the receive side with GPUDirect flush, a flush QP of 256 send WRs.
/// Returns (pages, QPs, CQs).
pub(super) fn ring_pages(i: &Inputs, dir: Direction) -> (u64, u64, u64) {
    let page = i.page();
    let pages = |bytes: u64| bytes.div_ceil(page);
    let q = i.qps_per_connection.clamp(1, MAX_QPS);
    let cq_entries = |wrs: u64| (wrs + 1).next_power_of_two();
    match dir {
        Direction::Send => {
            let cq = pages(cq_entries(IB_MAX_REQUESTS * q) * MLX5_CQE);
            let qp = pages((2 * IB_MAX_REQUESTS * MLX5_SEND_WQE).next_power_of_two());
            (cq + q * qp, q, 1)
        }
        Direction::Recv => {
            let cq = pages(cq_entries(2 * IB_MAX_REQUESTS * q) * MLX5_CQE);
            let sq = (2 * IB_MAX_REQUESTS * MLX5_SEND_WQE).next_power_of_two();
            let rq = (IB_MAX_REQUESTS.next_power_of_two() * MLX5_RECV_WQE).max(64);
            let qp = pages(sq + rq);
            let flush = if i.gdr_flush { pages((IB_MAX_REQUESTS * MLX5_SEND_WQE).next_power_of_two()) } else { 0 };
            (cq + q * qp + flush, q + u64::from(i.gdr_flush), 1)
        }
    }
}
