//! NCCL as the preflight sees it: how NCCL reads its environment ([`env`], with the variable
//! list generated from NCCL's source in [`variables`] and the grammars of its text-valued
//! variables in [`grammar`]) and how much memory NCCL registers, connection by connection
//! ([`model`]), in the GPUDirect charging mode [`crate::gdr`] detects.

pub mod env;
pub mod grammar;
pub mod model;
pub mod variables;
