//! tapflow-engine
