//! memlock-exporter's HTTP side, an exporter toolkit: the server ([`server`]: limits on
//! connections, requests and the bytes responses hold; basic auth with bcrypt; TLS), its web
//! configuration file ([`webconfig`], exporter-toolkit's format) and gzip bodies that compress a
//! page's text once ([`gzip`]). It serves any [`page::Page`]; it knows nothing of collectors.

pub mod gzip;
pub mod page;
pub mod server;
pub mod webconfig;
