//! What the bench binaries (`src/bin/bench*`) share: their command line, the
//! BPF_PROG_TEST_RUN harness, perf's split of a CPU, operating-system helpers and the printed tables.

pub mod args;
pub mod perf;
pub mod scale;
pub mod sys;
pub mod table;
pub mod testrun;
