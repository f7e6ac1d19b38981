//! Helpers shared by the wire tests; the other crates' tests include these files by path.

pub mod corpus;
pub mod traffic;
