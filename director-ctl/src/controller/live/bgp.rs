//! TEMPORARY placeholder until the BMP collector lands.
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use director_plan::config::Config;
use director_plan::model::Route;
use ipnet::IpNet;

use super::Wake;
use crate::api::Log;

pub struct Bgp;

impl Bgp {
    pub fn start(_cfg: &Config, _log: Log, _wake: Arc<Wake>) -> Result<Option<Bgp>> {
        Ok(None)
    }
    pub fn reconfigure(&mut self, _cfg: &Config) {}
    pub fn all_synced(&mut self, _now: Instant) -> bool {
        true
    }
    pub fn tick(&mut self, _now: Instant) {}
    pub fn dirty(&self) -> bool {
        false
    }
    pub fn take_dirty(&mut self) -> Vec<IpNet> {
        Vec::new()
    }
    pub fn has_view(&self, _site: usize) -> bool {
        false
    }
    pub fn best(&self, _site: usize, _p: &IpNet) -> Option<Route> {
        None
    }
    pub fn table(&self, _site: usize) -> Vec<(IpNet, Route)> {
        Vec::new()
    }
}
