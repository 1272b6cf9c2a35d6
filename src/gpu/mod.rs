//! The GPU side of training (feature `torch`; the CUDA parts with the `cuda` feature, each
//! with a CPU twin for tests): autocast regions ([`amp`]), CUDA streams, events and device
//! queries ([`cuda`]), whole-step CUDA graphs ([`cuda_graph`]), host-to-device copies off the
//! compute stream ([`transfer`]), which GPU a CUDA device is ([`identity`]: PCI bus id, model,
//! memory, from the CUDA runtime loaded at run time).

pub mod amp;
pub mod cuda;
pub mod cuda_graph;
pub mod identity;
pub mod transfer;
