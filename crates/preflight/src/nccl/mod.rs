//! NCCL as the preflight sees it: how NCCL reads one value ([`param`]), the variables it reads,
//! generated from NCCL's source ([`variables`]), the grammars of its text-valued variables
//! ([`grammar`]), its environment as NCCL reads it ([`env`], over those three), and how much
//! memory NCCL registers, connection by connection ([`model`]), in the GPUDirect charging mode
//! [`memlock_core::gdr`] detects; and the job's own NCCL_DEBUG=INFO log ([`log`]).

pub mod env;
pub mod grammar;
pub mod library;
pub mod log;
pub mod model;
pub mod param;
pub mod variables;
