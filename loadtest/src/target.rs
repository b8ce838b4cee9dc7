//! The server under test. Only loopback targets are allowed: a load test sends a burst of
//! traffic, and this tool must never aim one at another machine.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::{bail, Context, Result};

#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    /// The `Host` header.
    pub host: String,
    /// Path prefix before `/v1/...` (usually empty).
    pub base_path: String,
}

impl Target {
    /// Parses `http://HOST[:PORT][/PREFIX]`, refusing any host that is not loopback
    /// (127.0.0.0/8, `localhost`, `::1`). Hostnames other than `localhost` are refused
    /// rather than resolved: a name could point anywhere.
    pub fn parse(url: &str) -> Result<Self> {
        let rest = match url.split_once("://") {
            Some(("http", rest)) => rest,
            Some((scheme, _)) => bail!("unsupported scheme `{scheme}` in {url:?}: only http:// is supported"),
            None => bail!("{url:?} is not a URL; expected http://127.0.0.1:PORT"),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let (host, port) = split_host_port(authority).with_context(|| format!("bad host in {url:?}"))?;
        let ip: IpAddr = if host.eq_ignore_ascii_case("localhost") {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            host.parse().map_err(|_| refusal(host))?
        };
        if !ip.is_loopback() {
            return Err(refusal(host));
        }
        Ok(Self { addr: SocketAddr::new(ip, port), host: authority.to_string(), base_path: path.to_string() })
    }

    pub fn path(&self, route: &str) -> String {
        format!("{}{route}", self.base_path)
    }
}

fn refusal(host: &str) -> anyhow::Error {
    anyhow::anyhow!("refusing to load-test {host:?}: only loopback targets (127.0.0.0/8, localhost, ::1) are allowed")
}

fn split_host_port(authority: &str) -> Result<(&str, u16)> {
    if authority.contains('@') {
        bail!("credentials in the URL are not supported");
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').context("unclosed `[` in an IPv6 host")?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        bail!("empty host");
    }
    let port = match port {
        Some(p) => p.parse().with_context(|| format!("bad port {p:?}"))?,
        None => 80,
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_loopback_only() {
        for ok in ["http://127.0.0.1:8000", "http://localhost:1", "http://[::1]:9/x/", "http://127.8.9.10:80"] {
            assert!(Target::parse(ok).is_ok(), "{ok} should be accepted");
        }
        let t = Target::parse("http://[::1]:9/x/").unwrap();
        assert_eq!((t.addr.port(), t.base_path.as_str()), (9, "/x"));
        for bad in [
            "http://10.0.0.1:8000",
            "http://192.168.1.2",
            "http://8.8.8.8:80",
            "http://example.com:8000",
            "http://localhost.evil.com:80",
            "http://[::ffff:8.8.8.8]:80",
            "http://0.0.0.0:8000",
            "https://127.0.0.1:8000",
            "127.0.0.1:8000",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad} should be refused");
        }
        let err = Target::parse("http://10.1.2.3:80").unwrap_err().to_string();
        assert!(err.contains("loopback"), "{err}");
    }
}
