//! `DIR_SERVERS`: each server at its id, with its addresses, state and last load.

use std::net::{Ipv4Addr, Ipv6Addr};

use anyhow::{bail, Context, Result};
use director_common::maps::{
    ServerRecord, SERVER_DRAINED, SERVER_EXISTS, SERVER_NAME_LEN, SERVER_UP, SERVER_V4, SERVER_V6,
};

use super::entries::ServerEntry;
use super::Maps;

impl Maps {
    /// Every server in the table, by id.
    pub fn servers(&self) -> Result<Vec<ServerEntry>> {
        let mut out = Vec::new();
        for (i, s) in self.servers.iter().enumerate() {
            let s = s.context("reading the server table")?;
            if i > 0 && s.flags & SERVER_EXISTS != 0 {
                out.push(server_entry(i as u16, &s));
            }
        }
        Ok(out)
    }

    /// One server, if it exists.
    pub fn server(&self, id: u16) -> Result<Option<ServerEntry>> {
        let s = self
            .servers
            .get(&u32::from(id), 0)
            .with_context(|| format!("reading server {id}"))?;
        Ok((s.flags & SERVER_EXISTS != 0).then(|| server_entry(id, &s)))
    }

    /// The lowest server id no server has.
    pub fn free_server_id(&self) -> Result<u16> {
        for (i, s) in self.servers.iter().enumerate().skip(1) {
            if s.context("reading the server table")?.flags & SERVER_EXISTS == 0 {
                return Ok(i as u16);
            }
        }
        bail!("the server table is full")
    }

    /// Writes a server at its id (a new one, or new addresses or state for an existing one).
    pub fn put_server(&mut self, e: &ServerEntry) -> Result<()> {
        if e.name.len() >= SERVER_NAME_LEN {
            bail!(
                "server name {:?} is over {} bytes",
                e.name,
                SERVER_NAME_LEN - 1
            );
        }
        let mut s = empty_server();
        s.flags = SERVER_EXISTS;
        s.name[..e.name.len()].copy_from_slice(e.name.as_bytes());
        if e.up {
            s.flags |= SERVER_UP;
        }
        if e.drained {
            s.flags |= SERVER_DRAINED;
        }
        s.load = e.load.map_or(f32::NAN, |l| l as f32).to_bits();
        if let Some(a) = e.ipv4 {
            s.flags |= SERVER_V4;
            s.ipv4 = a.octets();
        }
        if let Some(a) = e.ipv6 {
            s.flags |= SERVER_V6;
            s.ipv6 = a.octets();
        }
        self.servers
            .set(u32::from(e.id), s, 0)
            .context("writing the server table")
    }

    pub fn set_server_up(&mut self, id: u16, up: bool) -> Result<()> {
        self.set_server_flag(id, SERVER_UP, up)
    }

    /// Records a server's load (for `status` and `server list`).
    pub fn set_server_load(&mut self, id: u16, load: f64) -> Result<()> {
        let key = u32::from(id);
        let mut s = self
            .servers
            .get(&key, 0)
            .with_context(|| format!("reading server {id}"))?;
        let bits = (load as f32).to_bits();
        if s.flags & SERVER_EXISTS == 0 || s.load == bits {
            return Ok(());
        }
        s.load = bits;
        self.servers
            .set(key, s, 0)
            .context("writing the server table")
    }

    pub fn set_server_drained(&mut self, id: u16, drained: bool) -> Result<()> {
        self.set_server_flag(id, SERVER_DRAINED, drained)
    }

    fn set_server_flag(&mut self, id: u16, flag: u8, on: bool) -> Result<()> {
        let key = u32::from(id);
        let mut s = self
            .servers
            .get(&key, 0)
            .with_context(|| format!("reading server {id}"))?;
        if on {
            s.flags |= flag;
        } else {
            s.flags &= !flag;
        }
        self.servers
            .set(key, s, 0)
            .context("writing the server table")
    }

    pub fn remove_server(&mut self, id: u16) -> Result<()> {
        self.servers
            .set(u32::from(id), empty_server(), 0)
            .context("writing the server table")
    }
}

pub(super) fn empty_server() -> ServerRecord {
    ServerRecord {
        flags: 0,
        _pad: [0; 3],
        ipv4: [0; 4],
        ipv6: [0; 16],
        name: [0; SERVER_NAME_LEN],
        load: f32::NAN.to_bits(),
        _pad2: 0,
    }
}

fn server_entry(id: u16, s: &ServerRecord) -> ServerEntry {
    let end = s.name.iter().position(|&b| b == 0).unwrap_or(s.name.len());
    ServerEntry {
        id,
        name: String::from_utf8_lossy(&s.name[..end]).into_owned(),
        ipv4: (s.flags & SERVER_V4 != 0).then(|| Ipv4Addr::from(s.ipv4)),
        ipv6: (s.flags & SERVER_V6 != 0).then(|| Ipv6Addr::from(s.ipv6)),
        up: s.flags & SERVER_UP != 0,
        drained: s.flags & SERVER_DRAINED != 0,
        load: Some(f32::from_bits(s.load))
            .filter(|l| !l.is_nan())
            .map(load_as_read),
    }
}

/// The kernel keeps a load as f32; widening it bit for bit would show 0.4 as
/// 0.4000000059604645. The shortest decimal that reads back as the same f32 is what the
/// operator wrote (or the load file said), so that is what JSON and text show.
fn load_as_read(load: f32) -> f64 {
    load.to_string().parse().unwrap_or(f64::from(load))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_load_reads_back_as_written_not_as_the_widened_f32() {
        assert_eq!(load_as_read(0.4), 0.4);
        assert_eq!(load_as_read(0.75), 0.75);
        assert_eq!(load_as_read(12.3), 12.3);
        assert_ne!(f64::from(0.4f32), 0.4, "the defect this guards against");
    }

    proptest! {
        #[test]
        fn a_load_keeps_its_f32_value(bits in any::<u32>()) {
            let l = f32::from_bits(bits);
            prop_assume!(l.is_finite());
            prop_assert_eq!(load_as_read(l) as f32, l);
        }
    }
}
