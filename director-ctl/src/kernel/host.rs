//! The host's network facts the XDP program needs: its addresses (queries to anything
//! else are not for this edge) and an interface's index and MAC. Read with getifaddrs(3),
//! which asks the kernel over netlink (RTM_GETADDR, RTM_GETLINK) in this network namespace.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{bail, Result};

/// One entry of getifaddrs: the interface's name and, by family, an address or its link
/// (ifindex, MAC).
enum Entry {
    Addr(IpAddr),
    Link { ifindex: u32, mac: [u8; 6] },
}

fn entries() -> Result<Vec<(String, Entry)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string in the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY (each cast): sa_family says which sockaddr type ifa_addr points at.
        let entry = match i32::from(unsafe { (*ifa.ifa_addr).sa_family }) {
            libc::AF_INET => {
                let sa = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                Entry::Addr(IpAddr::V4(Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr))))
            }
            libc::AF_INET6 => {
                let sa = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                Entry::Addr(IpAddr::V6(Ipv6Addr::from(sa.sin6_addr.s6_addr)))
            }
            libc::AF_PACKET => {
                let sa = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_ll) };
                let mut mac = [0u8; 6];
                if sa.sll_halen as usize == mac.len() {
                    mac.copy_from_slice(&sa.sll_addr[..6]);
                }
                Entry::Link {
                    ifindex: sa.sll_ifindex as u32,
                    mac,
                }
            }
            _ => continue,
        };
        out.push((name, entry));
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Every address of every interface of this network namespace, sorted. An anycast DNS
/// address usually sits on `lo`, so no interface is left out.
pub fn addresses() -> Result<Vec<IpAddr>> {
    let mut v: Vec<IpAddr> = entries()?
        .into_iter()
        .filter_map(|(_, e)| match e {
            Entry::Addr(a) => Some(a),
            Entry::Link { .. } => None,
        })
        .collect();
    v.sort();
    v.dedup();
    Ok(v)
}

/// An interface's index and MAC address.
pub fn link(iface: &str) -> Result<(u32, [u8; 6])> {
    for (name, e) in entries()? {
        if let (true, Entry::Link { ifindex, mac }) = (name == iface, e) {
            return Ok((ifindex, mac));
        }
    }
    bail!("no interface {iface} in this network namespace")
}
