//! `[telemetry]` (or `[otel]`): whether and where the process exports its
//! traces (OTLP over HTTP/protobuf), with the standard `OTEL_*` environment
//! variables deciding over the file, as every OpenTelemetry SDK lets them.
//! Off unless the file turns it on or an OTLP endpoint is set in the
//! environment.

use serde::Deserialize;
use toml::Spanned;

use super::url::is_http_url;
use super::{ConfigError, Reload, Source, reload::short_hash};

/// The OTLP/HTTP port collectors listen on.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
/// The service name traces carry unless told otherwise.
pub const DEFAULT_SERVICE_NAME: &str = "mcptask";

/// `[telemetry]`: trace export.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// Export traces (default: off, unless an `OTEL_EXPORTER_OTLP_*ENDPOINT`
    /// variable is set).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The collector's OTLP/HTTP base URL; `/v1/traces` is appended
    /// (default `http://localhost:4318`).
    #[serde(default)]
    pub endpoint: Option<Spanned<String>>,
    /// `service.name` of the traces (default `mcptask`).
    #[serde(default)]
    pub service_name: Option<String>,
}

/// Where traces go, once resolved; `None` from [`TelemetrySection::resolve`]
/// means no exporter at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceExport {
    /// The full URL traces are POSTed to.
    pub traces_endpoint: String,
    /// `service.name`.
    pub service_name: String,
}

impl TelemetrySection {
    /// The exporter is installed once, at start.
    pub const RELOAD: Reload = Reload::AtStart;

    /// `endpoint` is an http(s) URL (one the HTTP client can parse).
    pub(crate) fn check(&self, src: &Source) -> Result<(), ConfigError> {
        let Some(endpoint) = &self.endpoint else {
            return Ok(());
        };
        let url = endpoint.get_ref();
        if is_http_url(url) && reqwest::Url::parse(url).is_ok() {
            return Ok(());
        }
        Err(src.at(
            endpoint.span(),
            &format!("telemetry endpoint {url:?} is not an http(s) URL"),
            "give the collector's OTLP/HTTP address, e.g. endpoint = \"http://localhost:4318\"",
        ))
    }

    /// What a reload compares.
    pub(crate) fn print(&self) -> String {
        short_hash(&(
            self.enabled,
            self.endpoint.as_ref().map(|e| e.get_ref().clone()),
            &self.service_name,
        ))
    }

    /// Whether and where to export, with the environment (`get`) deciding
    /// over the file: `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`
    /// turn it off, `OTEL_TRACES_EXPORTER=otlp` on; otherwise the file's
    /// `enabled`, else on when an OTLP endpoint variable is set. Endpoint:
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as is, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` or the file's, plus `/v1/traces`.
    pub fn resolve(
        &self,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<TraceExport>, String> {
        let var = |key: &str| {
            get(key)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let forced = match var("OTEL_TRACES_EXPORTER").as_deref() {
            None => None,
            Some("none") => return Ok(None),
            Some("otlp") => Some(true),
            Some(other) => {
                return Err(format!(
                    "OTEL_TRACES_EXPORTER={other:?} is not supported\n  fix: use otlp (or none to turn traces off)"
                ));
            }
        };
        if let Some(protocol) = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .filter(|p| p != "http/protobuf")
        {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={protocol:?} is not supported\n  fix: mcptask exports OTLP over HTTP: use http/protobuf (a collector's port 4318)"
            ));
        }
        let signal = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let base = var("OTEL_EXPORTER_OTLP_ENDPOINT");
        let on = forced
            .or(self.enabled)
            .unwrap_or(signal.is_some() || base.is_some());
        if !on {
            return Ok(None);
        }
        let traces_endpoint = match signal {
            Some(url) => url,
            None => {
                let base = base
                    .or_else(|| self.endpoint.as_ref().map(|e| e.get_ref().clone()))
                    .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
                format!("{}/v1/traces", base.trim_end_matches('/'))
            }
        };
        let service_name = var("OTEL_SERVICE_NAME")
            .or_else(|| self.service_name.clone())
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string());
        Ok(Some(TraceExport {
            traces_endpoint,
            service_name,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn resolve(toml: &str, env: &[(&str, &str)]) -> Result<Option<TraceExport>, String> {
        let text = format!("[api]\nauth = \"none\"\n{toml}");
        let config = Config::parse("mcptask.toml", &text).map_err(|e| e.to_string())?;
        config.telemetry.resolve(|k| {
            env.iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn off_by_default() {
        assert_eq!(resolve("", &[]), Ok(None));
        assert_eq!(resolve("[telemetry]\n", &[]), Ok(None));
    }

    #[test]
    fn the_file_turns_it_on() {
        let on = resolve(
            "[telemetry]\nenabled = true\nendpoint = \"http://collector:4318/\"\nservice_name = \"gw-1\"\n",
            &[],
        );
        assert_eq!(
            on,
            Ok(Some(TraceExport {
                traces_endpoint: "http://collector:4318/v1/traces".into(),
                service_name: "gw-1".into(),
            }))
        );
        // `[otel]` is the same section.
        let otel = resolve("[otel]\nenabled = true\n", &[]).unwrap().unwrap();
        assert_eq!(otel.traces_endpoint, "http://localhost:4318/v1/traces");
        assert_eq!(otel.service_name, "mcptask");
    }

    #[test]
    fn the_environment_decides_over_the_file() {
        // An endpoint in the environment turns it on.
        let on = resolve("", &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap();
        assert_eq!(on.unwrap().traces_endpoint, "http://c:4318/v1/traces");
        let signal = resolve(
            "[telemetry]\nenabled = true\nendpoint = \"http://file:4318\"\n",
            &[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:9999/custom"),
                ("OTEL_SERVICE_NAME", "from-env"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(signal.traces_endpoint, "http://c:9999/custom");
        assert_eq!(signal.service_name, "from-env");
        // The file's explicit `enabled = false` holds against an endpoint…
        let off = resolve(
            "[telemetry]\nenabled = false\n",
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")],
        );
        assert_eq!(off, Ok(None));
        // …but not against OTEL_TRACES_EXPORTER=otlp.
        let forced = resolve(
            "[telemetry]\nenabled = false\n",
            &[("OTEL_TRACES_EXPORTER", "otlp")],
        );
        assert!(forced.unwrap().is_some());
        // The SDK switches turn it off whatever the file says.
        for env in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(resolve("[telemetry]\nenabled = true\n", &[env]), Ok(None));
        }
    }

    #[test]
    fn what_cannot_be_honoured_is_an_error() {
        let zipkin = resolve("", &[("OTEL_TRACES_EXPORTER", "zipkin")]).unwrap_err();
        assert!(zipkin.contains("fix: use otlp"), "{zipkin}");
        let grpc = resolve(
            "[telemetry]\nenabled = true\n",
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
        )
        .unwrap_err();
        assert!(grpc.contains("http/protobuf"), "{grpc}");
        let bad = resolve("\n[telemetry]\nendpoint = \"collector:4318\"\n", &[]).unwrap_err();
        assert!(
            bad.starts_with("mcptask.toml:5:12: telemetry endpoint"),
            "{bad}"
        );
        assert!(
            bad.contains("fix: give the collector's OTLP/HTTP address"),
            "{bad}"
        );
    }
}
