//! Put in force what the file and the stored objects make together,
//! through the reload a SIGHUP runs.

use super::Admin;
use crate::Gateway;
use crate::live::Changes;

/// Why a sync put nothing in force.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The stored objects could not be read.
    #[error("cannot read the configuration stored by the admin API: {0}")]
    Store(#[from] mcptask_core::StoreError),
    /// The file and the objects do not make a configuration (the file was
    /// edited since), or the reload refused it.
    #[error("{0:#}")]
    Refused(anyhow::Error),
}

impl Admin {
    /// Read the stored objects and, when they differ from those in force
    /// (or `force`: the file changed, a SIGHUP), build the configuration
    /// with the file and reload it. `None`: nothing to do. What cannot be
    /// built or reloaded leaves the configuration in force as it was.
    pub async fn sync(&self, gateway: &Gateway, force: bool) -> Result<Option<Changes>, SyncError> {
        let mut applied = self.applied.lock().await;
        let entries = match self.store.list_admin_entries().await {
            Ok(entries) => entries,
            // A SIGHUP while the store is out of reach still reloads the
            // file, with the stored servers last read (the next sync reads
            // them again).
            Err(e) if force => {
                tracing::warn!(error = %e, "cannot read the servers stored by the admin API; reloading the file with those last read");
                applied.clone().unwrap_or_default()
            }
            Err(e) => return Err(e.into()),
        };
        if !force && applied.as_ref() == Some(&entries) {
            return Ok(None);
        }
        let next = self
            .file
            .load(&entries)
            .map_err(|e| SyncError::Refused(e.into()))?;
        let shadowed = next.origins.shadowed.clone();
        let changes = gateway.reload(next).await.map_err(SyncError::Refused)?;
        for (kind, name) in shadowed {
            tracing::warn!(kind = kind.noun(), %name, "an object set through the admin API is also defined in the configuration file: the file's definition is in force (the file wins); delete the stored one or remove it from the file");
        }
        *applied = Some(entries);
        Ok(Some(changes))
    }
}
