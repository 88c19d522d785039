//! The credential each call carries to its upstream, as the faces and the
//! call runtime ask for it (the decision itself is `crate::identity`'s).

use super::{CallOptions, Tracker, TrackerError};
use crate::identity::CallCredential;

impl Tracker {
    /// What a new call to `server` made with `options` carries on its
    /// create: nothing (the gateway's own), its principal's token, or the
    /// caller's token exchanged now and held under the call's id (minted
    /// into `options` if it had none) for the call's later exchanges.
    /// Refused (the server, and why) when the call cannot be authorized.
    pub async fn new_call_credential(
        &self,
        server: &str,
        options: &mut CallOptions,
    ) -> Result<Option<CallCredential>, TrackerError> {
        let inner = &self.inner;
        let (def, _) = inner
            .servers
            .get(server)
            .ok_or_else(|| TrackerError::UnknownServer(server.into()))?;
        let id = options
            .id
            .get_or_insert_with(mcptask_core::ids::new_local_task_id)
            .clone();
        Ok(inner
            .identities
            .begin(
                server,
                &def.identity,
                &id,
                options.principal.as_deref(),
                options.subject_token.as_ref(),
            )
            .await?)
    }

    /// What a later exchange of call `call_id` of `principal` to `server`
    /// carries (see [`Tracker::new_call_credential`]).
    pub async fn call_credential(
        &self,
        server: &str,
        call_id: &str,
        principal: Option<&str>,
    ) -> Result<Option<CallCredential>, TrackerError> {
        Ok(self
            .inner
            .credential_for(server, call_id, principal)
            .await?)
    }

    /// Forget what is held for call `call_id` (it ended, or was never kept).
    pub fn forget_credential(&self, call_id: &str) {
        self.inner.identities.forget(call_id);
    }
}
