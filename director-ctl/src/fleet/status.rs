//! `fleet status`: every edge, its version and age, the publishers and the store's size,
//! read from the store (an edge's report outlives its lease, so one cut off shows its age).
//! The map page of a publisher reads the same, on a connection it keeps.

use anyhow::Result;
use director_plan::fleet::envelope;

use super::edge::Report;
use super::store::{now_ms, Store, RTT};
use super::version::manifest_unchecked;
use super::votes::Overlay;
use crate::api::{FleetAgent, FleetEdge, FleetPublisher, FleetStatus};

pub async fn status(url: &str, fleet: &str) -> Result<FleetStatus> {
    let mut st = Store::connect(url, fleet).await?;
    status_with(&mut st, fleet).await
}

/// [`status`] on a store already connected.
pub async fn status_with(st: &mut Store, fleet: &str) -> Result<FleetStatus> {
    let (current, _) = st.current(false).await?;
    // Read, not checked: status says what the store holds and who says they signed it;
    // each edge's report says what it refused.
    let signed = match current {
        Some(v) => st.get(&st.version_key(v), true).await?,
        None => None,
    };
    let manifest = signed.as_deref().and_then(|b| manifest_unchecked(b).ok());
    let signed_by = signed
        .as_deref()
        .and_then(envelope::peek)
        .map(|(_, ids)| ids)
        .unwrap_or_default();
    let election = st.key("election");
    let leader = match crate::fleet::store::bounded(
        || "asking the leader".into(),
        st.client().leader(election.as_str()),
    )
    .await
    {
        Ok(r) => r
            .kv()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
        Err(_) => None,
    };
    // Each campaigner's key under the election holds its name, leader and standbys alike.
    let mut publishers: Vec<FleetPublisher> = st
        .list("election/")
        .await?
        .into_iter()
        .map(|(_, name)| {
            let name = String::from_utf8_lossy(&name).into_owned();
            FleetPublisher {
                leader: leader.as_deref() == Some(name.as_str()),
                name,
            }
        })
        .collect();
    publishers.sort_by(|a, b| b.leader.cmp(&a.leader).then(a.name.cmp(&b.name)));
    let mut versions: Vec<u64> = st
        .keys("versions/")
        .await?
        .iter()
        .filter_map(|k| k.parse().ok())
        .collect();
    versions.sort_unstable();
    let live: std::collections::HashSet<String> = st.keys("live/").await?.into_iter().collect();
    let now = now_ms();
    let age = |ms: u64| now.saturating_sub(ms) as f64 / 1e3;
    let mut edges = Vec::new();
    for (name, b) in st.list("edges/").await? {
        let Ok(r) = serde_json::from_slice::<Report>(&b) else {
            continue;
        };
        let mut e = FleetEdge {
            live: live.contains(&name),
            site: r.site,
            version: r.version,
            current: r.version.is_some() && r.version == current,
            report_age_s: age(r.reported_ms),
            version_age_s: if r.since_ms == 0 {
                0.0
            } else {
                age(r.since_ms)
            },
            name,
            state: String::new(),
            program: r.program,
            refused: r.refused,
        };
        e.state = e.judge().to_string();
        edges.push(e);
    }
    let overlay_signed = st.get(&st.key("overlay"), false).await?;
    let overlay_signed_by = overlay_signed
        .as_deref()
        .and_then(envelope::peek)
        .map(|(_, ids)| ids)
        .unwrap_or_default();
    let overlay = overlay_signed
        .as_deref()
        .and_then(Overlay::unchecked)
        .unwrap_or_default();
    // Keys only: a report may be large, and presence is what its lease says.
    let agents = st
        .keys(RTT)
        .await?
        .into_iter()
        .filter_map(|k| {
            let (site, name) = k.split_once('/')?;
            Some(FleetAgent {
                site: site.to_string(),
                name: name.to_string(),
            })
        })
        .collect();
    let (store_bytes, store_bytes_in_use) = st.db_size().await?;
    Ok(FleetStatus {
        version: crate::api::VERSION,
        fleet: fleet.to_string(),
        current,
        published_by: manifest.as_ref().map(|m| m.publisher.clone()),
        published_ms: manifest.as_ref().map(|m| m.published_ms),
        leader,
        publishers,
        versions,
        edges,
        signed_by,
        overlay_serial: overlay.serial,
        overlay_signed_by,
        overlay: overlay.down,
        store_bytes,
        store_bytes_in_use,
        live_inputs: manifest.and_then(|m| m.sources.live),
        agents,
    })
}
