//! Hugepage pools from `/sys/kernel/mm/hugepages/hugepages-<size>kB/` and the per-NUMA-node
//! `/sys/devices/system/node/nodeN/hugepages/`. Shared by the node and numa collectors.

use std::path::Path;

use crate::exposition::Exposition;
use memlock_kernel::fsroot::{self, SourceError};
use memlock_kernel::{parse_u64, sysvm::parse_hugepage_dir_name};

use super::{keep, optional};

/// One pool of one page size, in pages. The per-node pools have no `reserved` count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HugepagePool {
    pub size_bytes: u64,
    pub total: Option<u64>,
    pub free: Option<u64>,
    pub reserved: Option<u64>,
    pub(crate) surplus: Option<u64>,
}

impl HugepagePool {
    pub fn states(&self) -> [(&'static str, Option<u64>); 4] {
        [("total", self.total), ("free", self.free), ("reserved", self.reserved), ("surplus", self.surplus)]
    }
}

/// Reads every `hugepages-*kB` directory below `dir`. A missing `dir` (no hugetlb) is no pools.
pub(crate) fn read_pools(dir: &Path, errors: &mut Vec<SourceError>) -> Vec<HugepagePool> {
    let names = match optional(fsroot::list_dir(dir)) {
        Ok(names) => names.unwrap_or_default(),
        Err(e) => {
            errors.push(e);
            return Vec::new();
        }
    };
    let mut pools = Vec::new();
    for name in names {
        let Some(size_bytes) = parse_hugepage_dir_name(&name) else { continue };
        let pool_dir = dir.join(&name);
        let mut read = |file: &str| keep(optional(fsroot::read_parsed(&pool_dir.join(file), parse_u64)), errors);
        pools.push(HugepagePool {
            size_bytes,
            total: read("nr_hugepages"),
            free: read("free_hugepages"),
            reserved: read("resv_hugepages"),
            surplus: read("surplus_hugepages"),
        });
    }
    pools.sort_by_key(|p| p.size_bytes);
    pools
}

/// Writes one `{size_bytes, state}` series per known count; `extra` labels come first.
pub fn render(out: &mut Exposition, extra: &[(&str, &str)], pools: &[HugepagePool]) {
    for pool in pools {
        let size = pool.size_bytes.to_string();
        for (state, value) in pool.states() {
            let mut labels: Vec<(&str, &str)> = extra.to_vec();
            labels.push(("size_bytes", &size));
            labels.push(("state", state));
            out.maybe(&labels, value);
        }
    }
}
