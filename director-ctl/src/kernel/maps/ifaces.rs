//! `DIR_IFACES`: the interfaces director is attached to, by index, with their MACs.

use anyhow::{bail, Context, Result};
use director_common::maps::{Iface, MAX_IFACES};

use super::Maps;

impl Maps {
    /// Records the MAC of an interface director is attached to: queries arriving there
    /// must be sent to it.
    pub fn put_iface(&mut self, ifindex: u32, mac: [u8; 6]) -> Result<()> {
        if ifindex >= MAX_IFACES {
            bail!("interface index {ifindex} is beyond what director records ({MAX_IFACES})");
        }
        let v = Iface {
            mac,
            attached: 1,
            _pad: 0,
        };
        self.ifaces
            .set(ifindex, v, 0)
            .context("writing the interface table")
    }

    pub fn remove_iface(&mut self, ifindex: u32) -> Result<()> {
        if ifindex >= MAX_IFACES {
            return Ok(());
        }
        self.ifaces
            .set(ifindex, Iface::default(), 0)
            .context("writing the interface table")
    }
}
