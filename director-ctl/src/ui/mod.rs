//! `[ui] listen`: the map page `run` serves. One HTML page, its script and style, and the
//! country outlines, all compiled into the binary (no CDN, no build step outside cargo),
//! so the page works on a machine with no route to the Internet. The page reads
//! `/ui/feed` (the table as director-plan's `atlas` lays it over the map) and `/explain`.

use std::net::SocketAddr;

use serde::Deserialize;

/// `[ui]`: where `run` serves the map page.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UiConfig {
    /// May be `[metrics] listen`: then one listener serves both. Loopback unless given
    /// (the same as `[metrics]`'s default, so one listener serves both).
    #[serde(default = "loopback")]
    pub listen: SocketAddr,
    /// Degrees per side of the grid cells clients are summed in.
    #[serde(default = "two")]
    pub grid: f64,
    /// Seconds between the page's looks at the feed.
    #[serde(default = "two")]
    pub refresh: f64,
}

/// `[metrics]`'s default (loopback, 9273): ui may not use the metrics module.
fn loopback() -> SocketAddr {
    SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), 9273)
}

fn two() -> f64 {
    2.0
}

impl UiConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        if !(self.grid >= 0.25 && self.grid <= 30.0) {
            anyhow::bail!("[ui] grid {}: give degrees from 0.25 to 30", self.grid);
        }
        if !(self.refresh >= 0.5 && self.refresh <= 300.0) {
            anyhow::bail!(
                "[ui] refresh {}: give seconds from 0.5 to 300",
                self.refresh
            );
        }
        Ok(())
    }
}

const INDEX: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/app.js");
const STYLE: &str = include_str!("page/style.css");
const WORLD: &str = include_str!("page/world/countries-110m.json");
const WORLD_LICENSE: &str = include_str!("page/world/LICENSE");

/// The page's static files by path: (content type, body).
pub fn asset(path: &str, refresh: f64) -> Option<(&'static str, String)> {
    Some(match path {
        "/" | "/ui" | "/ui/" => (
            "text/html; charset=utf-8",
            INDEX.replace("{{refresh}}", &format!("{refresh}")),
        ),
        "/ui/app.js" => ("text/javascript; charset=utf-8", SCRIPT.into()),
        "/ui/style.css" => ("text/css; charset=utf-8", STYLE.into()),
        "/ui/world.json" => ("application/json", WORLD.into()),
        "/ui/world-LICENSE" => ("text/plain; charset=utf-8", WORLD_LICENSE.into()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_only_files_served_here() {
        let (_, html) = asset("/", 2.0).unwrap();
        assert!(html.contains("data-refresh=\"2\""));
        // Every src/href in the page is one of ours (nothing from a CDN).
        for attr in ["src=\"", "href=\""] {
            for part in html.split(attr).skip(1) {
                let url = part.split('"').next().unwrap();
                assert!(
                    asset(url, 2.0).is_some(),
                    "the page loads {url}, which is not served"
                );
            }
        }
        let (_, js) = asset("/ui/app.js", 2.0).unwrap();
        // The only URL in the script is SVG's namespace, which is a name, not a fetch.
        let js = js.replace("http://www.w3.org/2000/svg", "");
        assert!(!js.contains("http://") && !js.contains("https://"));
        let (_, world) = asset("/ui/world.json", 2.0).unwrap();
        let v: serde_json::Value = serde_json::from_str(&world).unwrap();
        assert_eq!(v["type"], "Topology");
        assert!(
            v["objects"]["countries"]["geometries"]
                .as_array()
                .unwrap()
                .len()
                > 150
        );
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let c = UiConfig {
            listen: "127.0.0.1:8080".parse().unwrap(),
            grid: 0.0,
            refresh: 2.0,
        };
        assert!(c.validate().unwrap_err().to_string().contains("[ui] grid"));
        let c = UiConfig {
            grid: 2.0,
            refresh: 0.1,
            ..c
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("[ui] refresh"));
    }
}
