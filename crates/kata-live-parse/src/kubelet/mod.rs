//! What kata-live reads to follow kubelet's connection to the CRI socket: /proc's fd links
//! and socket paths ([`procfd`]), the sock_diag dump's replies ([`sockdiag`]) and CRI-O's
//! metrics text ([`metrics`]).

pub mod metrics;
pub mod procfd;
pub mod sockdiag;
