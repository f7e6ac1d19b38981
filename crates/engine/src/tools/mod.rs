//! Tools beside the packet path: the NIC checks of `tapflow doctor`, the ring model of
//! `tapflow plan`, and the traffic generator of `tapflow gen`.

pub mod doctor;
pub mod doctor_xdp;
pub mod generator;
pub mod plan;
