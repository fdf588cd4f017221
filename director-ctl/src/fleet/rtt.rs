//! The RTT agents' reports through the store (`[rtt] from_store`): each agent writes its
//! report under `rtt/<site>/<agent>` on a lease of its own (`director-ctl agent --store`),
//! and every publisher, leading or standing by, reads them all at each `[rtt] poll` and
//! hands them to its live inputs as if it had polled each agent: the same merge, and a
//! standby that takes over has them already.
//!
//! A read per poll rather than a watch: the agents write once a window, the merge takes a
//! window once however often it is read, and a read needs no resync after a compaction or
//! a member's death (a failed read is tried again at the next poll, on the next member).

use std::sync::mpsc::Sender;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::store::{Store, RTT};
use crate::controller::live::agents::{Feed, Polled, Report, FROM_STORE};

/// The reports in the fleet `fleet` of the store at `url`, read every `every`.
pub fn feed(url: String, fleet: String, every: Duration) -> Feed {
    Box::new(move |out, wake| {
        tokio::spawn(async move {
            let mut st: Option<Store> = None;
            loop {
                let read = async {
                    if st.is_none() {
                        st = Some(Store::connect(&url, &fleet).await?);
                    }
                    let s = st.as_mut().context("no store")?;
                    s.list(RTT).await
                };
                let sent = match read.await {
                    Ok(kvs) => send_all(&out, kvs),
                    Err(e) => {
                        // A fresh connection next time: this one may be to a member that is
                        // gone.
                        st = None;
                        out.send(Polled {
                            agent: FROM_STORE.to_string(),
                            report: Err(e.context("reading the agents' reports from the store")),
                        })
                        .is_ok()
                    }
                };
                if !sent {
                    // The live inputs are gone.
                    return;
                }
                wake();
                tokio::time::sleep(every).await;
            }
        });
    })
}

fn send_all(out: &Sender<Polled>, kvs: Vec<(String, Vec<u8>)>) -> bool {
    kvs.into_iter().all(|(key, value)| {
        let (agent, report) = parse(&key, &value);
        out.send(Polled { agent, report }).is_ok()
    })
}

/// A key under `rtt/` (`<site>/<agent>`) and its value: the agent's name as the merge and
/// `explain` show it, and its report, which must be of the key's site.
pub fn parse(key: &str, value: &[u8]) -> (String, Result<Report>) {
    let agent = format!("{FROM_STORE}{key}");
    let report = (|| {
        let (site, _) = key
            .split_once('/')
            .with_context(|| format!("{RTT}{key}: not <site>/<agent>"))?;
        let r: Report = serde_json::from_slice(value)
            .with_context(|| format!("{RTT}{key}: not an RTT report"))?;
        if r.site != site {
            bail!("{RTT}{key}: a report of site {:?}", r.site);
        }
        Ok(r)
    })();
    (agent, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_the_agent_and_its_site_must_be_the_reports() {
        let v = br#"{"version":1,"site":"fra","window_s":10,"now_ms":5,"records":[
            {"prefix":"198.51.100.0/24","min_ms":40.5,"median_ms":41.0,"samples":12,
             "window_start_ms":0,"window_end_ms":10000}],"counters":{}}"#;
        let (agent, r) = parse("fra/s1", v);
        assert_eq!(agent, "store:fra/s1");
        let r = r.unwrap();
        assert_eq!((r.site.as_str(), r.records.len()), ("fra", 1));
        let (_, r) = parse("ams/s1", v);
        assert!(format!("{:#}", r.unwrap_err()).contains("site \"fra\""));
        let (_, r) = parse("fra", v);
        assert!(r.is_err());
        let (_, r) = parse("fra/s1", b"{}");
        assert!(r.is_err());
    }
}
