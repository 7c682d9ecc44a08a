//! Prometheus text exposition for `dxdp watch --metrics ADDR`: the counters the watch writes
//! ([`counters`]), what the pinned maps hold at scrape time ([`scrape`]), the text made of both
//! ([`render`]) and the HTTP endpoint that serves it ([`server`]).
mod counters;
mod render;
mod scrape;
mod server;

pub use counters::Metrics;
pub use server::serve;
