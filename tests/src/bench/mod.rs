//! What the bench binaries (`src/bin/bench*`) share: their command line, the
//! BPF_PROG_TEST_RUN harness, operating-system helpers and the printed tables.

pub mod args;
pub mod scale;
pub mod sys;
pub mod table;
pub mod testrun;
