//! The client side: IAs, EVDs, service points and endpoints whose
//! connections go through a bridge.

pub(crate) mod ep;
pub(crate) mod evd;
pub(crate) mod ia;
pub(crate) mod psp;
