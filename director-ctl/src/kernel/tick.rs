//! The kernel's tick (10^9 / CONFIG_HZ ns), which the XDP program's rate limiter multiplies
//! its tick count by (`rrl::RRL_TICK_NS`). Read from the running kernel's config: HZ is
//! fixed when the kernel is built and no interface reports it (USER_HZ, which sysconf
//! gives, is always 100). Unknown (no config where kernels keep it) is not an error: the
//! program then reads the coarse clock through its helper.

use std::io::Read;
use std::path::Path;

/// The tick in ns, or 0 where the kernel's HZ cannot be read.
pub fn tick_ns() -> u64 {
    hz().map_or(0, |hz| 1_000_000_000 / hz)
}

fn hz() -> Option<u64> {
    let mut text = String::new();
    if let Ok(f) = std::fs::File::open("/proc/config.gz") {
        flate2::read::GzDecoder::new(f)
            .read_to_string(&mut text)
            .ok()?;
    } else {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
        let path = Path::new("/boot").join(format!("config-{}", release.trim()));
        text = std::fs::read_to_string(path).ok()?;
    }
    config_hz(&text)
}

/// CONFIG_HZ from a kernel config, if it is one of the values Kconfig offers.
fn config_hz(config: &str) -> Option<u64> {
    let hz = config
        .lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))?
        .trim()
        .parse()
        .ok()?;
    [24, 48, 100, 250, 300, 500, 1000, 1200]
        .contains(&hz)
        .then_some(hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_hz_from_a_config_and_refuses_odd_values() {
        let c =
            "# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\nCONFIG_HZ_PERIODIC=n\n";
        assert_eq!(config_hz(c), Some(250));
        assert_eq!(config_hz("CONFIG_HZ=0\n"), None);
        assert_eq!(config_hz("CONFIG_HZ=abc\n"), None);
        assert_eq!(config_hz("CONFIG_HZ_250=y\n"), None);
    }
}
