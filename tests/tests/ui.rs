//! The map page in a real browser: `run` in a namespace serves it from `[ui] listen`,
//! headless Chromium (over WebDriver) loads it, and the test reads what is drawn: a marker
//! per site, the grid cells coloured by the site the kernel's table really answers for an
//! address of each (asked with dig and ECS), explain on a click and from the address box,
//! a drained site's clients redrawn elsewhere without a reload, and a screenshot of the
//! expected size. Real data: GeoLite2 City places the clients.

use std::collections::HashMap;
use std::fs;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::time::Duration;

use director_ctl::api;
use director_tests::browser::{png_size, Browser};
use director_tests::netns::{shared_data, workspace_root, Controller, Lab, Reply, EDGE_V4};
use director_tests::tempdir::TempDir;

const WWW: &str = "www.example.com";
const IMG: &str = "img.example.com";
const UI: &str = "127.0.0.1:9291";
const DRIVER_PORT: u16 = 9515;
const WIDTH: u32 = 1280;
const HEIGHT: u32 = 860;

/// Four sites at real points of presence, one server each, www by distance.
const SITES: &[(&str, f64, f64, &str)] = &[
    ("fra", 50.0264, 8.5431, "198.51.100.11"),
    ("iad", 38.9445, -77.4558, "198.51.100.12"),
    ("gru", -23.4356, -46.4731, "198.51.100.13"),
    ("nrt", 35.7647, 140.3860, "198.51.100.14"),
];

fn config() -> String {
    let mut t = format!(
        "[geo]\ndatabase = {:?}\n\n[ui]\nlisten = {UI:?}\ngrid = 2\nrefresh = 1\n\n",
        shared_data("geo/GeoLite2-City.mmdb").display().to_string()
    );
    for (name, lat, lon, _) in SITES {
        t.push_str(&format!(
            "[[site]]\nname = {name:?}\nlat = {lat}\nlon = {lon}\n\n"
        ));
    }
    for (i, (name, _, _, v4)) in SITES.iter().enumerate() {
        t.push_str(&format!(
            "[[server]]\nname = \"{name}-1\"\nsite = {name:?}\nipv4 = {v4:?}\n\
             ipv6 = \"2001:db8:100::{}\"\n\n",
            i + 11
        ));
    }
    t.push_str(&format!(
        "[[service]]\nname = {WWW:?}\nttl = 30\n\
         servers = [\"fra-1\", \"iad-1\", \"gru-1\", \"nrt-1\"]\n\
         priority = {{ geo = 1, admin = 2 }}\n\n\
         [[service]]\nname = {IMG:?}\nttl = 30\nservers = [\"fra-1\", \"iad-1\"]\n\
         priority = {{ geo = 1, admin = 2 }}\n"
    ));
    t
}

/// The site whose server the kernel answers `address`'s /24 (or /48) with: dig with ECS.
fn answered_site(lab: &Lab, address: &str) -> Option<String> {
    let addr: std::net::IpAddr = address.parse().unwrap();
    let (rtype, subnet) = match addr {
        std::net::IpAddr::V4(v) => ("A", format!("{}/24", Ipv4Addr::from(u32::from(v) & !0xff))),
        std::net::IpAddr::V6(v) => (
            "AAAA",
            format!(
                "{}/48",
                Ipv6Addr::from(u128::from(v) & !((1u128 << 80) - 1))
            ),
        ),
    };
    let out = lab.dig(&[
        &format!("@{EDGE_V4}"),
        WWW,
        rtype,
        &format!("+subnet={subnet}"),
    ]);
    let answer: std::net::IpAddr = Reply::parse(&out).data(rtype).first()?.parse().ok()?;
    SITES.iter().enumerate().find_map(|(i, s)| {
        let v6: std::net::IpAddr = format!("2001:db8:100::{}", i + 11).parse().ok()?;
        let v4: std::net::IpAddr = s.3.parse().ok()?;
        (answer == v4 || answer == v6).then(|| s.0.to_string())
    })
}

fn feed(lab: &Lab, service: &str) -> api::Atlas {
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", lab.edge_ns))
        .args(["curl", "-sS", "--fail", "--max-time", "60"])
        .arg(format!("http://{UI}/ui/feed?service={service}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "GET /ui/feed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "feed is not an Atlas ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The explain panel's answer line, once the page has one.
fn explained(b: &Browser) -> serde_json::Value {
    b.wait_for(
        "const e = document.getElementById('explain-answer'); return e && e.textContent;",
        Duration::from_secs(20),
    )
    .unwrap()
}

/// The page's cells as drawn: (lat, lon) → (site, fill, sample).
fn drawn_cells(b: &Browser) -> HashMap<(i64, i64), (String, String, String)> {
    let v = b
        .eval(
            "return [...document.querySelectorAll('#cells rect.cell')].map(r => \
             [Number(r.dataset.lat), Number(r.dataset.lon), r.dataset.site, \
              r.getAttribute('fill'), r.dataset.sample]);",
        )
        .unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                (c[0].as_f64().unwrap() as i64, c[1].as_f64().unwrap() as i64),
                (
                    c[2].as_str().unwrap().to_string(),
                    c[3].as_str().unwrap().to_string(),
                    c[4].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect()
}

#[test]
fn the_map_page_shows_where_the_table_sends_each_place_and_follows_changes() {
    let lab = Lab::new();
    lab.attach();
    let dir = TempDir::new("ui", "map");
    let cfg = dir.path("director.toml");
    fs::write(&cfg, config()).unwrap();
    let mut run = Controller::start(&lab, &cfg, &dir.path("run.log"));
    run.wait_for("entries written", 1, Duration::from_secs(120));
    run.wait_for("the map page on", 1, Duration::from_secs(5));

    // The feed, as the page gets it.
    let f = feed(&lab, WWW);
    assert_eq!(f.service, WWW);
    assert_eq!(f.services, vec![WWW.to_string(), IMG.to_string()]);
    assert_eq!(f.sites.len(), 4);
    assert!(f.cells.len() > 200, "{} cells", f.cells.len());
    let total: f64 = f.sites.iter().map(|s| s.clients).sum::<f64>() + f.uncovered;
    assert!((total - f.clients).abs() < 1e-6 * f.clients);
    assert!(f.uncovered < 0.01 * f.clients, "the table has defaults");
    for s in &f.sites {
        assert!(s.share > 0.02, "{} gets {:.3} of clients", s.name, s.share);
    }

    let browser = Browser::start(&lab.edge_ns, DRIVER_PORT, WIDTH, HEIGHT)
        .unwrap_or_else(|e| panic!("{e}\n{}", run.log()));
    browser.open(&format!("http://{UI}/")).unwrap();
    let n = browser
        .wait_for(
            "const n = document.querySelectorAll('#cells rect.cell').length; return n > 0 && n;",
            Duration::from_secs(60),
        )
        .unwrap();
    assert_eq!(n.as_u64().unwrap() as usize, f.cells.len());
    // Country outlines drawn from the vendored file.
    let countries = browser
        .eval("return document.querySelectorAll('#countries path').length;")
        .unwrap();
    assert!(countries.as_u64().unwrap() > 150, "{countries} countries");
    // One marker per site, by name.
    let markers = browser
        .eval("return [...document.querySelectorAll('#sites .site')].map(g => g.dataset.site).sort();")
        .unwrap();
    assert_eq!(markers, serde_json::json!(["fra", "gru", "iad", "nrt"]));
    // Each site has one colour, given to its marker and its cells.
    let colours: HashMap<String, String> = serde_json::from_value(
        browser
            .eval(
                "return Object.fromEntries([...document.querySelectorAll('#sites .site')]\
                 .map(g => [g.dataset.site, g.querySelector('circle').getAttribute('fill')]));",
            )
            .unwrap(),
    )
    .unwrap();
    let distinct: std::collections::HashSet<&String> = colours.values().collect();
    assert_eq!(distinct.len(), 4, "{colours:?}");

    // The cells the feed gives wholly to one site, most clients first: what the page drew
    // for each is what the kernel answers for its sample address.
    let cells = drawn_cells(&browser);
    let mut whole: Vec<&api::AtlasCell> = f.cells.iter().filter(|c| c.share >= 0.999).collect();
    whole.sort_by(|a, b| b.clients.total_cmp(&a.clients));
    let mut seen_sites = std::collections::HashSet::new();
    let mut checked = 0;
    for c in whole.iter().take(40) {
        let site = c.site.clone().unwrap();
        if !seen_sites.insert(site.clone()) && checked >= 8 {
            continue;
        }
        let (drawn_site, fill, sample) = &cells[&(c.lat as i64, c.lon as i64)];
        assert_eq!(drawn_site, &site);
        assert_eq!(fill, &colours[&site], "cell {},{} of {site}", c.lat, c.lon);
        let answered = answered_site(&lab, sample);
        assert_eq!(
            answered.as_deref(),
            Some(site.as_str()),
            "cell {},{} is drawn as {site}; the kernel answers {sample} with {answered:?}",
            c.lat,
            c.lon
        );
        checked += 1;
    }
    assert!(seen_sites.len() >= 4, "cells checked for {seen_sites:?}");

    // Tokyo's cell goes to nrt; a click explains its sample address.
    let tokyo = (34, 138);
    assert_eq!(cells[&tokyo].0, "nrt");
    browser
        .eval(&format!(
            "document.querySelector('#cells rect[data-lat=\"{}\"][data-lon=\"{}\"]')\
             .dispatchEvent(new MouseEvent('click', {{bubbles: true}})); return true;",
            tokyo.0, tokyo.1
        ))
        .unwrap();
    let answer = explained(&browser);
    assert!(answer.as_str().unwrap().contains("nrt-1"), "{answer}");
    // The address box: an address GeoLite2 places in São Paulo's cell.
    let gru_sample = f
        .cells
        .iter()
        .filter(|c| c.site.as_deref() == Some("gru") && c.share >= 0.999)
        .max_by(|a, b| a.clients.total_cmp(&b.clients))
        .map(|c| c.sample.to_string())
        .unwrap();
    browser
        .eval(&format!(
            "document.getElementById('explain-answer').remove();\
             document.getElementById('address').value = '{gru_sample}';\
             document.getElementById('ask').requestSubmit(); return true;"
        ))
        .unwrap();
    let answer = explained(&browser);
    assert!(answer.as_str().unwrap().contains("gru-1"), "{answer}");

    // The screenshot is the viewport: the window less what the browser's frame takes.
    let viewport = browser
        .eval(
            "return [Math.round(innerWidth * devicePixelRatio), Math.round(innerHeight * devicePixelRatio)];",
        )
        .unwrap();
    let png = browser.screenshot().unwrap();
    let shot = workspace_root().join("target/ui-map.png");
    fs::write(&shot, &png).unwrap();
    assert!(png.len() > 20_000, "a {} byte screenshot", png.len());
    let (w, h) = png_size(&png).expect("a PNG");
    assert_eq!(serde_json::json!([w, h]), viewport);
    assert_eq!(w, WIDTH);
    assert!(h > HEIGHT / 2 && h <= HEIGHT, "{w} x {h}");

    // A route changes: nrt's server is drained. Without a reload, Tokyo's cell turns to
    // another site and nrt's marker shows its server out.
    browser
        .eval("window.notReloaded = true; return true;")
        .unwrap();
    let generation = browser
        .eval("return document.body.dataset.generation;")
        .unwrap();
    lab.ctl_ok(&["server", "drain", "nrt-1"]);
    // The re-sort is the controller's (a minute for 3.48 M prefixes in a debug build); the
    // page's part starts when the table is written.
    run.wait_for(
        "re-sorted without the servers that are out",
        1,
        Duration::from_secs(300),
    );
    let t = std::time::Instant::now();
    let site = browser
        .wait_for(
            &format!(
                "const r = document.querySelector('#cells rect[data-lat=\"{}\"][data-lon=\"{}\"]');\
                 return r && r.dataset.site !== 'nrt' && r.dataset.site;",
                tokyo.0, tokyo.1
            ),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", run.log()));
    let redrawn = t.elapsed();
    assert_ne!(
        browser
            .eval("return document.body.dataset.generation;")
            .unwrap(),
        generation
    );
    assert_eq!(
        browser.eval("return window.notReloaded === true;").unwrap(),
        true,
        "the page reloaded"
    );
    let site = site.as_str().unwrap().to_string();
    let sample = &drawn_cells(&browser)[&tokyo].2;
    assert_eq!(answered_site(&lab, sample).as_deref(), Some(site.as_str()));
    let health = browser
        .wait_for(
            "return document.querySelector('#sites .site[data-site=\"nrt\"]').dataset.health === 'down';",
            Duration::from_secs(5),
        );
    assert!(health.is_ok(), "nrt's marker: {health:?}");
    eprintln!(
        "map page: {} cells, Tokyo redrawn as {site} {:.1} s after the drain",
        f.cells.len(),
        redrawn.as_secs_f64()
    );

    // The selector: img has two sites; its feed and its cells are its own.
    browser
        .eval(&format!(
            "const s = document.getElementById('service'); s.value = '{IMG}';\
             s.dispatchEvent(new Event('change')); return true;"
        ))
        .unwrap();
    browser
        .wait_for(
            &format!("return document.body.dataset.service === '{IMG}';"),
            Duration::from_secs(15),
        )
        .unwrap();
    let img_sites = browser
        .wait_for(
            "const s = new Set([...document.querySelectorAll('#cells rect.cell')].map(r => r.dataset.site));\
             return s.size > 0 && [...s].sort();",
            Duration::from_secs(15),
        )
        .unwrap();
    assert_eq!(img_sites, serde_json::json!(["fra", "iad"]));
    drop(browser);
    run.stop();
}
