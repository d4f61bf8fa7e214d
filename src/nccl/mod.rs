//! NCCL as the preflight sees it: how NCCL reads its environment ([`env`], with the variable
//! list generated from NCCL's source in [`variables`] and the grammars of its text-valued
//! variables in [`grammar`]), which GPUDirect charging mode a node is
//! in ([`gdr`]), and how much memory NCCL registers, connection by connection ([`model`]).

pub mod env;
pub mod gdr;
pub mod grammar;
pub mod model;
pub mod variables;
