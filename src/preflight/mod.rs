//! The preflight half: what a job launcher or an operator runs before or beside a job, apart from
//! the daemon. [`check`] reads the node ([`check`]'s machine) and judges it against what
//! [`estimate`] derives from the [`nccl`] model; [`job_context`] adapts the rules' input to the
//! job's launcher (`--exec`, skips); [`drill`] ramps real pinned or locked memory until the
//! kernel refuses, through libibverbs loaded at run time ([`verbs`]).
//!
//! It depends one way on the layers below (kernel, fsroot, collect's readers, charge, units);
//! the daemon's modules never import it, only [`crate::cli`] does, to name the commands' flags.

pub mod check;
pub mod drill;
pub mod estimate;
pub mod job_context;
pub mod nccl;
pub mod verbs;
