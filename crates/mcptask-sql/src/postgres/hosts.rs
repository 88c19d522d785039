//! libpq-style host lists in a PostgreSQL URL: `postgres://user@h1:5432,h2:5433/db?target_session_attrs=read-write`.
//!
//! sqlx parses one host per URL (its issue #2290), so a list is split here
//! into one URL, and one set of [`PgConnectOptions`], per host; everything
//! else in the URL (user, password, database, `sslmode`, …) applies to every
//! host, as in libpq. The pool then connects to whichever host is the
//! current one (the `failover` module beside this one).
//!
//! ```
//! use mcptask_sql::postgres::hosts::{HostList, SessionAttrs};
//! let list = HostList::parse("postgres://app@db-a:5432,db-b/tasks?target_session_attrs=primary").unwrap();
//! assert_eq!(list.hosts().len(), 2);
//! assert_eq!(list.attrs(), SessionAttrs::Primary);
//! assert_eq!(list.hosts()[1].port, None);
//! ```

use std::fmt;
use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;

/// The URL parameter that says which server of a list to use.
const ATTRS_PARAM: &str = "target_session_attrs";

/// Which server of a host list a session may use (libpq's
/// `target_session_attrs`, the values that make sense for a store that
/// writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAttrs {
    /// The first host that accepts a connection, whatever it is.
    Any,
    /// A server that accepts writes: not in recovery and not
    /// `default_transaction_read_only`.
    ReadWrite,
    /// A server that is not in recovery (not a standby).
    Primary,
}

impl SessionAttrs {
    /// The value as written in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionAttrs::Any => "any",
            SessionAttrs::ReadWrite => "read-write",
            SessionAttrs::Primary => "primary",
        }
    }
}

/// One server of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// A name, an IPv4 address, or an IPv6 address without its brackets.
    pub name: String,
    /// `None`: the URL's `port` parameter, or 5432.
    pub port: Option<u16>,
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name.contains(':') {
            write!(f, "[{}]", self.name)?;
        } else {
            f.write_str(&self.name)?;
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// A PostgreSQL URL split into its hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList {
    /// `postgres://` or `postgresql://`.
    scheme: String,
    /// `user[:password]@`, or empty.
    userinfo: String,
    hosts: Vec<Host>,
    /// From the first `/` on (path, then the query without
    /// `target_session_attrs`, then any fragment).
    rest: String,
    attrs: SessionAttrs,
}

/// Why a PostgreSQL URL's host list cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostsError {
    /// Not `postgres://…` or `postgresql://…`.
    #[error("a PostgreSQL URL starts with postgres:// or postgresql://")]
    Scheme,
    /// An empty entry in the list (`h1,,h2`, a trailing comma).
    #[error("host {0} of the list is empty (write host[:port],host[:port],…)")]
    EmptyHost(usize),
    /// An IPv6 address with `[` but no `]`.
    #[error("host {0:?} opens a bracket it does not close (write [::1]:5432)")]
    Bracket(String),
    /// A port that is not a number from 1 to 65535.
    #[error("the port of host {host:?} is not a number from 1 to 65535: {port:?}")]
    Port {
        /// The host as written.
        host: String,
        /// The port as written.
        port: String,
    },
    /// A `target_session_attrs` value this store cannot use.
    #[error(
        "target_session_attrs={0:?} is not supported: use read-write (or primary, or any); mcptask writes, so a standby cannot serve it"
    )]
    Attrs(String),
    /// Hosts given in the query as well (`?host=a,b` or `?port=1,2`).
    #[error(
        "a list in the {0:?} parameter is not supported: write the hosts in the URL itself, postgres://user@h1:p1,h2:p2/db"
    )]
    ListInQuery(String),
}

impl HostList {
    /// Split `url` into its hosts. A URL with one host is a list of one.
    pub fn parse(url: &str) -> Result<HostList, HostsError> {
        let (scheme, after) = ["postgres://", "postgresql://"]
            .iter()
            .find_map(|s| url.strip_prefix(s).map(|rest| (*s, rest)))
            .ok_or(HostsError::Scheme)?;
        let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
        let (authority, rest) = after.split_at(authority_end);
        // A password may hold an '@' only percent-encoded, so the last one
        // ends the user part.
        let (userinfo, list) = match authority.rfind('@') {
            Some(at) => authority.split_at(at + 1),
            None => ("", authority),
        };
        let hosts = if list.is_empty() {
            // `postgres:///db`: sqlx's default host (and the query's `host`).
            vec![Host {
                name: String::new(),
                port: None,
            }]
        } else {
            list.split(',')
                .enumerate()
                .map(|(i, entry)| parse_host(i + 1, entry))
                .collect::<Result<Vec<_>, _>>()?
        };
        let (rest, attrs) = take_attrs(rest)?;
        let attrs = attrs.unwrap_or(if hosts.len() > 1 {
            // libpq's default is `any`; a store that writes wants the
            // primary, and a list exists to find it.
            SessionAttrs::ReadWrite
        } else {
            SessionAttrs::Any
        });
        Ok(HostList {
            scheme: scheme.to_string(),
            userinfo: userinfo.to_string(),
            hosts,
            rest,
            attrs,
        })
    }

    /// The hosts, in the URL's order (the order they are tried in).
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// Which of them a session may use.
    pub fn attrs(&self) -> SessionAttrs {
        self.attrs
    }

    /// The URL of host `i` alone (without `target_session_attrs`).
    pub fn url_of(&self, i: usize) -> String {
        let host = &self.hosts[i];
        let host = if host.name.is_empty() && host.port.is_none() {
            String::new()
        } else {
            host.to_string()
        };
        format!("{}{}{host}{}", self.scheme, self.userinfo, self.rest)
    }

    /// The whole URL again, the list joined back and `target_session_attrs`
    /// last.
    pub fn to_url(&self) -> String {
        let hosts: Vec<String> = self.hosts.iter().map(Host::to_string).collect();
        let (path, fragment) = match self.rest.find('#') {
            Some(i) => self.rest.split_at(i),
            None => (self.rest.as_str(), ""),
        };
        let join = if path.contains('?') { '&' } else { '?' };
        let slash = if path.is_empty() { "/" } else { "" };
        format!(
            "{}{}{}{path}{slash}{join}{ATTRS_PARAM}={}{fragment}",
            self.scheme,
            self.userinfo,
            hosts.join(","),
            self.attrs.as_str()
        )
    }

    /// The connect options of every host, in order. An error is sqlx's
    /// about the rest of the URL (the same for every host).
    pub fn connect_options(&self) -> Result<Vec<PgConnectOptions>, sqlx::Error> {
        (0..self.hosts.len())
            .map(|i| PgConnectOptions::from_str(&self.url_of(i)))
            .collect()
    }
}

fn parse_host(index: usize, entry: &str) -> Result<Host, HostsError> {
    if entry.is_empty() {
        return Err(HostsError::EmptyHost(index));
    }
    let (name, port) = if let Some(inner) = entry.strip_prefix('[') {
        let close = inner
            .find(']')
            .ok_or_else(|| HostsError::Bracket(entry.to_string()))?;
        let after = &inner[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(port) => Some(port),
            None if after.is_empty() => None,
            None => return Err(HostsError::Bracket(entry.to_string())),
        };
        (&inner[..close], port)
    } else {
        match entry.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (entry, None),
        }
    };
    if name.is_empty() {
        return Err(HostsError::EmptyHost(index));
    }
    let port = port
        .map(|p| match p.parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(HostsError::Port {
                host: entry.to_string(),
                port: p.to_string(),
            }),
        })
        .transpose()?;
    Ok(Host {
        name: name.to_string(),
        port,
    })
}

/// `rest` (path, query, fragment) without `target_session_attrs`, and its
/// value. A list in `host` or `port` is refused: sqlx would read it as one
/// host name.
fn take_attrs(rest: &str) -> Result<(String, Option<SessionAttrs>), HostsError> {
    let (before_fragment, fragment) = match rest.find('#') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let Some((path, query)) = before_fragment.split_once('?') else {
        return Ok((rest.to_string(), None));
    };
    let mut attrs = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            ATTRS_PARAM => {
                attrs = Some(match value {
                    "any" => SessionAttrs::Any,
                    "read-write" => SessionAttrs::ReadWrite,
                    "primary" => SessionAttrs::Primary,
                    other => return Err(HostsError::Attrs(other.to_string())),
                });
            }
            "host" | "hostaddr" | "port" if value.contains(',') || value.contains("%2C") => {
                return Err(HostsError::ListInQuery(key.to_string()));
            }
            _ => kept.push(pair),
        }
    }
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    Ok((format!("{path}{query}{fragment}"), attrs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn host(name: &str, port: Option<u16>) -> Host {
        Host {
            name: name.to_string(),
            port,
        }
    }

    #[test]
    fn a_list_is_split_with_its_ports_and_attrs() {
        let list = HostList::parse(
            "postgres://app:s%40cret@h1:5432,[::1]:6543,h3/tasks?sslmode=disable&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(
            list.hosts(),
            [
                host("h1", Some(5432)),
                host("::1", Some(6543)),
                host("h3", None)
            ]
        );
        assert_eq!(list.attrs(), SessionAttrs::ReadWrite);
        assert_eq!(
            list.url_of(1),
            "postgres://app:s%40cret@[::1]:6543/tasks?sslmode=disable"
        );
        let options = list.connect_options().unwrap();
        assert_eq!(options[1].get_port(), 6543);
        assert_eq!(options[2].get_host(), "h3");
        assert_eq!(options[2].get_port(), 5432);
        assert_eq!(options[0].get_database(), Some("tasks"));
    }

    #[test]
    fn one_host_is_a_list_of_one_and_any_by_default() {
        let list = HostList::parse("postgresql://u@db/x").unwrap();
        assert_eq!(list.hosts(), [host("db", None)]);
        assert_eq!(list.attrs(), SessionAttrs::Any);
        assert_eq!(list.url_of(0), "postgresql://u@db/x");
        // Several hosts without the parameter: the writable one.
        let list = HostList::parse("postgres://a,b/x").unwrap();
        assert_eq!(list.attrs(), SessionAttrs::ReadWrite);
        // No host at all keeps sqlx's defaults.
        assert_eq!(
            HostList::parse("postgres:///x").unwrap().url_of(0),
            "postgres:///x"
        );
    }

    #[test]
    fn malformed_lists_say_what_is_wrong() {
        let err = |url: &str| HostList::parse(url).unwrap_err();
        assert_eq!(err("mysql://h/db"), HostsError::Scheme);
        assert_eq!(err("postgres://u@h1,,h2/db"), HostsError::EmptyHost(2));
        assert_eq!(err("postgres://u@h1,/db"), HostsError::EmptyHost(2));
        assert_eq!(err("postgres://u@:5432,h2/db"), HostsError::EmptyHost(1));
        assert!(matches!(
            err("postgres://h1:54x2,h2/db"),
            HostsError::Port { .. }
        ));
        assert!(matches!(
            err("postgres://h1:0,h2/db"),
            HostsError::Port { .. }
        ));
        assert!(matches!(
            err("postgres://h1:70000/db"),
            HostsError::Port { .. }
        ));
        assert!(matches!(err("postgres://[::1/db"), HostsError::Bracket(_)));
        assert!(matches!(
            err("postgres://[::1]x/db"),
            HostsError::Bracket(_)
        ));
        assert_eq!(
            err("postgres://h/db?target_session_attrs=standby"),
            HostsError::Attrs("standby".into())
        );
        assert_eq!(
            err("postgres:///db?host=a,b"),
            HostsError::ListInQuery("host".into())
        );
        assert!(
            err("postgres://h/db?target_session_attrs=read-only")
                .to_string()
                .contains("read-write")
        );
    }

    fn arb_host() -> impl Strategy<Value = Host> {
        let name = prop_oneof![
            "[a-z][a-z0-9-]{0,12}(\\.[a-z]{2,5})?",
            "(25[0-5]|1[0-9]{2}|[1-9]?[0-9])(\\.(25[0-5]|1[0-9]{2}|[1-9]?[0-9])){3}",
            Just("::1".to_string()),
            Just("fe80::1:2".to_string()),
        ];
        (name, proptest::option::of(1u16..)).prop_map(|(name, port)| Host { name, port })
    }

    fn arb_attrs() -> impl Strategy<Value = SessionAttrs> {
        prop_oneof![
            Just(SessionAttrs::Any),
            Just(SessionAttrs::ReadWrite),
            Just(SessionAttrs::Primary)
        ]
    }

    proptest! {
        /// Written out and read back, a list is the same list; every host
        /// alone is a URL sqlx reads with that host and port.
        #[test]
        fn lists_round_trip(
            hosts in proptest::collection::vec(arb_host(), 1..5),
            attrs in arb_attrs(),
            query in proptest::option::of("sslmode=(disable|prefer)"),
        ) {
            let joined: Vec<String> = hosts.iter().map(Host::to_string).collect();
            let query = query.map(|q| format!("{q}&")).unwrap_or_default();
            let url = format!(
                "postgres://u:p@{}/db?{query}target_session_attrs={}",
                joined.join(","),
                attrs.as_str()
            );
            let list = HostList::parse(&url).unwrap();
            prop_assert_eq!(list.hosts(), hosts.as_slice());
            prop_assert_eq!(list.attrs(), attrs);
            prop_assert_eq!(HostList::parse(&list.to_url()).unwrap(), list.clone());
            for (options, host) in list.connect_options().unwrap().iter().zip(&hosts) {
                prop_assert_eq!(options.get_port(), host.port.unwrap_or(5432));
                prop_assert_eq!(options.get_database(), Some("db"));
            }
        }
    }
}
