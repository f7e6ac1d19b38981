//! tapflow-sys
