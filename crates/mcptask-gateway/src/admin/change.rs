//! A change through the admin API: checked as the file is (the file, the
//! stored objects and this change, built into one configuration by the
//! file's own reader and checks), refused with the file's message and
//! nothing changed when it fails; else stored, put in force here at once,
//! and by every other replica when the store tells it. Each attempt, made
//! or refused, goes to the audit trail with who made it.

use std::time::Instant;

use mcptask_core::admin::AdminEntry;
use mcptask_core::audit::AuditEvent;
use mcptask_core::call::Face;
use mcptask_core::outcome::Outcome;
use serde_json::Value;

use super::Admin;
use super::apply::SyncError;
use crate::Gateway;
use crate::auth::Caller;
use crate::config::ConfigError;
use crate::config::admin::{Kind, body, host_key};
use crate::live::Changes;

/// Why a change was refused (nothing was changed).
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The configuration file defines the object: the file wins.
    #[error(
        "{kind} {name:?} is defined in the configuration file, which wins over the admin API\n  fix: change it in the file and reload (SIGHUP), or choose another name", kind = .0.noun(), name = .1
    )]
    DefinedInFile(Kind, String),
    /// The definition sets a key that reads the gateway's host
    /// ([`crate::config::admin::HOST_KEYS`]).
    #[error(
        "server {0:?}: \"{1}\" makes the gateway run a program or read its own files or environment, which the admin API does not set\n  fix: define stdio servers and [servers.oauth] in the configuration file; the admin API sets HTTP servers"
    )]
    HostKey(String, &'static str),
    /// The admin API set no object of that kind and name.
    #[error("no {kind} {name:?} was set through the admin API", kind = .0.noun(), name = .1)]
    NotFound(Kind, String),
    /// The change does not make a valid configuration: the file's message.
    #[error("{0}")]
    Invalid(ConfigError),
    /// The store could not be read or written.
    #[error("the configuration store is unavailable: {0}")]
    Store(#[from] mcptask_core::StoreError),
}

/// A change made: stored, and what putting it in force here changed.
#[derive(Debug)]
pub struct Changed {
    /// What the reload here changed (`None`: it was in force already).
    pub changes: Option<Changes>,
    /// Why the stored change is not in force here yet, when it is not
    /// (the reload refused it; every replica retries at its next sync).
    pub not_applied: Option<String>,
}

/// Who made a change, as the audit trail and the stored object name it:
/// the principal, or the static operator token's print.
pub fn who(caller: &Caller) -> String {
    match (&caller.principal, &caller.token_print) {
        (Some(principal), _) => principal.clone(),
        (None, Some(print)) => format!("operator token {print}"),
        (None, None) => "operator (auth = none)".into(),
    }
}

/// The audit trail's action for `verb` on a `kind` object: `put_server`,
/// `delete_virtual_server`.
fn action(verb: &str, kind: Kind) -> String {
    format!("{verb}_{}", kind.noun().replace(' ', "_"))
}

/// One admin change in the audit trail: the server it names, the action
/// as the tool (`admin.put_server`), `admin` as the driver.
pub fn audit(caller: &Caller, server: &str, action: &str, refused: Option<&str>, started: Instant) {
    let (outcome, error_class) = match refused {
        None => (Outcome::Completed, None),
        Some("not_operator") => (Outcome::RefusedPolicy, Some("not_operator".to_string())),
        Some(class) => (Outcome::Failed, Some(class.to_string())),
    };
    // A name the checks refused is the caller's text: bounded like one.
    let server = if !server.is_empty() && server.len() <= 128 && !server.contains(char::is_control)
    {
        server.to_string()
    } else {
        crate::metrics::OTHER.to_string()
    };
    crate::audit::record(AuditEvent {
        at_ms: mcptask_core::Clock::now_ms(&mcptask_core::SystemClock),
        call_id: None,
        principal: Some(who(caller)),
        face: Face::Api,
        server,
        tool: format!("admin.{action}"),
        driver: "admin".into(),
        outcome,
        error_class,
        duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
        via: None,
    });
}

impl ChangeError {
    /// The audit trail's class of this refusal.
    fn class(&self) -> &'static str {
        match self {
            ChangeError::DefinedInFile(..) => "defined_in_file",
            ChangeError::NotFound(..) => "not_found",
            ChangeError::HostKey(..) => "host_key",
            ChangeError::Invalid(_) => "invalid_config",
            ChangeError::Store(_) => "store",
        }
    }
}

impl Admin {
    /// Add or replace the `kind` object `name` with `definition` (the keys
    /// of its table as JSON), audited as `admin.put_<kind>`.
    pub async fn put_object(
        &self,
        gateway: &Gateway,
        caller: &Caller,
        kind: Kind,
        name: &str,
        definition: &Value,
    ) -> Result<Changed, ChangeError> {
        let started = Instant::now();
        let made = self.put(gateway, caller, kind, name, definition).await;
        audit(
            caller,
            name,
            &action("put", kind),
            made.as_ref().err().map(ChangeError::class),
            started,
        );
        made
    }

    /// Delete the `kind` object `name`, set through the admin API, audited
    /// as `admin.delete_<kind>`.
    pub async fn delete_object(
        &self,
        gateway: &Gateway,
        caller: &Caller,
        kind: Kind,
        name: &str,
    ) -> Result<Changed, ChangeError> {
        let started = Instant::now();
        let made = self.delete(gateway, kind, name).await;
        audit(
            caller,
            name,
            &action("delete", kind),
            made.as_ref().err().map(ChangeError::class),
            started,
        );
        made
    }

    async fn put(
        &self,
        gateway: &Gateway,
        caller: &Caller,
        kind: Kind,
        name: &str,
        definition: &Value,
    ) -> Result<Changed, ChangeError> {
        if kind == Kind::Server
            && let Some(key) = host_key(definition)
        {
            return Err(ChangeError::HostKey(name.into(), key));
        }
        let body = body(kind, name, definition).map_err(ChangeError::Invalid)?;
        let entry = AdminEntry {
            kind: kind.table().into(),
            name: name.into(),
            body,
            changed_by: who(caller),
            changed_at_ms: mcptask_core::Clock::now_ms(&mcptask_core::SystemClock),
        };
        let mut candidate = self.store.list_admin_entries().await?;
        candidate.retain(|e| !(e.kind == kind.table() && e.name == name));
        candidate.push(entry.clone());
        self.check(&candidate, kind, name)?;
        self.store.put_admin_entry(&entry).await?;
        Ok(self.apply_here(gateway).await)
    }

    async fn delete(
        &self,
        gateway: &Gateway,
        kind: Kind,
        name: &str,
    ) -> Result<Changed, ChangeError> {
        let mut candidate = self.store.list_admin_entries().await?;
        let before = candidate.len();
        candidate.retain(|e| !(e.kind == kind.table() && e.name == name));
        if candidate.len() == before {
            let config = self.file.load(&candidate).map_err(ChangeError::Invalid)?;
            return Err(if config.file_defines(kind, name) {
                ChangeError::DefinedInFile(kind, name.into())
            } else {
                ChangeError::NotFound(kind, name.into())
            });
        }
        self.check(&candidate, kind, name)?;
        self.store.delete_admin_entry(kind.table(), name).await?;
        Ok(self.apply_here(gateway).await)
    }

    /// The configuration `candidate` makes with the file today, checked;
    /// the file must not define the `kind` object `name`.
    fn check(&self, candidate: &[AdminEntry], kind: Kind, name: &str) -> Result<(), ChangeError> {
        let config = self.file.load(candidate).map_err(ChangeError::Invalid)?;
        if config.origins.is_shadowed(kind, name) {
            return Err(ChangeError::DefinedInFile(kind, name.into()));
        }
        Ok(())
    }

    /// Put what is stored in force here at once (the other replicas follow
    /// their channel).
    async fn apply_here(&self, gateway: &Gateway) -> Changed {
        match self.sync(gateway, false).await {
            Ok(changes) => Changed {
                changes,
                not_applied: None,
            },
            Err(e @ (SyncError::Store(_) | SyncError::Refused(_))) => {
                tracing::error!("an admin API change was stored but not applied here: {e}");
                Changed {
                    changes: None,
                    not_applied: Some(e.to_string()),
                }
            }
        }
    }
}
