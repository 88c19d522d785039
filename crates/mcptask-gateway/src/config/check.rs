//! The checks of a whole file: each section's own check, in file order;
//! the first problem found is the error.

use super::{Config, ConfigError, PolicySection, ServerSection, Source, VirtualServerSection};

impl Config {
    /// Check every section.
    pub(crate) fn check(&self, src: &Source) -> Result<(), ConfigError> {
        let spans = &self.spans;
        ServerSection::check_all(&self.servers, src)?;
        VirtualServerSection::check_all(&self.virtual_servers, &self.servers, src)?;
        self.api.check(src, spans)?;
        for webhook in &self.webhooks {
            webhook.check(src)?;
        }
        self.limits.check(src, spans)?;
        PolicySection::check_all(&self.policy, src, spans)?;
        self.telemetry.check(src)?;
        self.audit.check(src)?;
        self.check_tracker(src)
    }

    /// `[tracker]`: the client's own checks, at the key they name.
    fn check_tracker(&self, src: &Source) -> Result<(), ConfigError> {
        self.tracker.validate().map_err(|invalid| {
            src.at(
                self.spans.tracker_key(invalid.key),
                &format!("tracker.{invalid}"),
                invalid.fix,
            )
        })
    }
}
