//! Input readers: files in, plain data (the [`crate::model`] types) out.
//!
//! - [`mrt`]: MRT RIB and update files (bgpkit-parser) to one best
//!   [`crate::model::Route`] per prefix;
//! - [`bmp`]: live routes from routers' BMP sessions (RFC 7854), the same routes kept up to
//!   date (pure: the listener in director-ctl hands in bytes and the time);
//! - [`geo`]: a MaxMind DB GeoIP database to (network,
//!   [`crate::model::GeoPoint`]) pairs;
//! - [`csv`]: measured RTTs and operator-given client locations;
//! - [`graph`]: the operator's weighted location graph (TOML), with shortest paths;
//! - [`sites`]: real points of presence, to place sites in tests and benchmarks.
//!
//! Every error is an `anyhow` error whose message (with `{}`) names the file, the line or record
//! where there is one, and the reason. None of these readers panics on bad input.

pub mod bmp;
pub mod csv;
mod decision;
#[cfg(test)]
mod fuzz;
pub mod geo;
pub mod graph;
pub mod mrt;
pub mod sites;

use std::path::Path;

use anyhow::Result;

/// A whole text file; the error names `what` and the file.
fn read_text(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {what} {}: {e}", path.display()))
}

/// A file of the shared real data (`../shared/data/REL` from the workspace root). Panics with a
/// clear message when it is missing: tests on real data must not skip silently.
#[cfg(test)]
pub(crate) fn test_data(rel: &str) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let p = root.join("../shared/data").join(rel);
    assert!(
        p.is_file(),
        "test data file {} is missing: the project's checkout must have shared/ beside it \
         (shared/data/{rel}, see shared/data/README.md); it is not copied into the repository",
        p.display()
    );
    p.canonicalize().unwrap_or(p)
}

/// Peak resident memory of this process so far (VmHWM), for the timing tests' reports.
#[cfg(test)]
pub(crate) fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l[6..].trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}
