//! Upstream prompts and resources, passed through the front.
//!
//! Prompts are named as tools are (`<prefix>__<name>`, an empty prefix keeps
//! the name). Resources keep their URIs, which clients understand (`file://`,
//! a server's own scheme); only their names take the prefix. A read goes to
//! the server that listed the URI, else to the server with the longest
//! matching literal start of a URI template, else to the only server that
//! offers resources. Each list asks every server at that moment (in
//! parallel, bounded by the call timeout): work proportional to the number
//! of servers, never to the number of tasks. A server that offers none, or
//! cannot be reached, is left out of the list and logged.

use crate::failure::Failure;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use futures::future::join_all;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse, Prompt,
    ReadResourceRequestParams, ReadResourceResponse, Reference, Resource, ResourceTemplate,
};
use rmcp::service::ServiceError;
use rmcp::{ErrorData, Peer, RoleClient};

use crate::upstreams::catalog::front_name;
use crate::upstreams::{Upstream, Upstreams};

/// Where prompts and resources were last seen.
#[derive(Default)]
pub struct Directory {
    /// Front prompt name → (server, upstream prompt name).
    prompts: Mutex<HashMap<String, (String, String)>>,
    /// Resource URI → server.
    resources: Mutex<HashMap<String, String>>,
    /// (literal start of a URI template, server), longest first.
    templates: Mutex<Vec<(String, String)>>,
    /// Servers that listed any resource or template.
    offering: Mutex<Vec<String>>,
}

fn error_of(e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(data) => data,
        other => Failure::unreachable(&other).into(),
    }
}

/// Run `op` on a lane of `server`, waiting for the lane and the answer at
/// most the pool's call timeout.
async fn on_lane<T, F, Fut>(upstreams: &Upstreams, server: &str, op: F) -> Result<T, ErrorData>
where
    F: FnOnce(Peer<RoleClient>) -> Fut,
    Fut: Future<Output = Result<T, ServiceError>>,
{
    let pool = upstreams
        .lanes(server)
        .map_err(|e| Failure::unreachable(&e))?;
    let limit = pool.options().call_timeout;
    let call = async {
        let lane = pool.acquire().await.map_err(|e| Failure::unreachable(&e))?;
        op(lane.peer().clone()).await.map_err(error_of)
    };
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r,
        Err(_) => Err(ErrorData::internal_error(
            format!("{server:?} did not answer within {limit:?}"),
            None,
        )),
    }
}

/// `method_not_found` is how a server says it offers none: not worth a warning.
fn offers_none(e: &ErrorData) -> bool {
    e.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND
}

/// Each server's answer to `list`, with the failures logged and left out.
async fn from_every_server<T, F, Fut>(
    upstreams: &Upstreams,
    what: &str,
    list: F,
) -> Vec<(Upstream, T)>
where
    F: Fn(Peer<RoleClient>) -> Fut,
    Fut: Future<Output = Result<T, ServiceError>>,
{
    let servers = upstreams.servers().to_vec();
    let answers = join_all(servers.iter().map(|s| on_lane(upstreams, &s.name, &list))).await;
    servers
        .into_iter()
        .zip(answers)
        .filter_map(|(server, answer)| match answer {
            Ok(items) => Some((server, items)),
            Err(e) if offers_none(&e) => None,
            Err(e) => {
                tracing::warn!(server = %server.name, error = %e.message, "cannot list the {what} of an upstream server");
                None
            }
        })
        .collect()
}

/// The literal start of a URI template (up to its first expression).
fn literal_start(template: &str) -> &str {
    template.split('{').next().unwrap_or(template)
}

impl Directory {
    /// Every server's prompts, named for the front.
    pub async fn list_prompts(&self, upstreams: &Upstreams) -> Vec<Prompt> {
        let lists = from_every_server(upstreams, "prompts", |peer| async move {
            peer.list_all_prompts().await
        })
        .await;
        let mut names = HashMap::new();
        let mut out = Vec::new();
        for (server, prompts) in lists {
            for mut prompt in prompts {
                let front = front_name(&server.prefix, &prompt.name);
                if names.contains_key(&front) {
                    tracing::warn!(prompt = %front, server = %server.name, "an upstream prompt name clashes; left out");
                    continue;
                }
                names.insert(front.clone(), (server.name.clone(), prompt.name.clone()));
                prompt.name = front;
                out.push(prompt);
            }
        }
        *self.prompts.lock().expect("directory lock") = names;
        out
    }

    /// `prompts/get` of a front prompt name, answered by its server as is.
    pub async fn get_prompt(
        &self,
        upstreams: &Upstreams,
        mut request: GetPromptRequestParams,
    ) -> Result<GetPromptResponse, ErrorData> {
        let known = |d: &Self| {
            d.prompts
                .lock()
                .expect("directory lock")
                .get(&request.name)
                .cloned()
        };
        let route = match known(self) {
            Some(r) => Some(r),
            None => {
                self.list_prompts(upstreams).await;
                known(self)
            }
        };
        let Some((server, name)) = route else {
            return Err(ErrorData::invalid_params(
                format!("unknown prompt {:?}", request.name),
                None,
            ));
        };
        request.name = name;
        on_lane(upstreams, &server, |peer| async move {
            peer.get_prompt_once(request).await
        })
        .await
    }

    /// Every server's resources, URIs unchanged, names prefixed.
    pub async fn list_resources(&self, upstreams: &Upstreams) -> Vec<Resource> {
        let lists = from_every_server(upstreams, "resources", |peer| async move {
            peer.list_all_resources().await
        })
        .await;
        let mut by_uri = HashMap::new();
        let mut out = Vec::new();
        for (server, resources) in lists {
            self.offers(&server.name);
            for mut resource in resources {
                if by_uri.contains_key(&resource.uri) {
                    tracing::warn!(uri = %resource.uri, server = %server.name, "two upstream servers list one resource URI; the first keeps it");
                    continue;
                }
                by_uri.insert(resource.uri.clone(), server.name.clone());
                resource.name = front_name(&server.prefix, &resource.name);
                out.push(resource);
            }
        }
        *self.resources.lock().expect("directory lock") = by_uri;
        out
    }

    /// Every server's resource templates, names prefixed.
    pub async fn list_templates(&self, upstreams: &Upstreams) -> Vec<ResourceTemplate> {
        let lists = from_every_server(upstreams, "resource templates", |peer| async move {
            peer.list_all_resource_templates().await
        })
        .await;
        let mut starts = Vec::new();
        let mut out = Vec::new();
        for (server, templates) in lists {
            self.offers(&server.name);
            for mut template in templates {
                starts.push((
                    literal_start(&template.uri_template).to_string(),
                    server.name.clone(),
                ));
                template.name = front_name(&server.prefix, &template.name);
                out.push(template);
            }
        }
        starts.sort_by_key(|(start, _)| std::cmp::Reverse(start.len()));
        *self.templates.lock().expect("directory lock") = starts;
        out
    }

    fn offers(&self, server: &str) {
        let mut offering = self.offering.lock().expect("directory lock");
        if !offering.iter().any(|s| s == server) {
            offering.push(server.to_string());
        }
    }

    /// The server a URI belongs to, from what was last listed.
    fn server_of(&self, uri: &str) -> Option<String> {
        if let Some(server) = self.resources.lock().expect("directory lock").get(uri) {
            return Some(server.clone());
        }
        let templates = self.templates.lock().expect("directory lock");
        if let Some((_, server)) = templates
            .iter()
            .find(|(start, _)| !start.is_empty() && uri.starts_with(start.as_str()))
        {
            return Some(server.clone());
        }
        match self.offering.lock().expect("directory lock").as_slice() {
            [only] => Some(only.clone()),
            _ => None,
        }
    }

    /// `completion/complete`, answered as is by the server of the prompt (its
    /// front name mapped back) or of the resource template referred to.
    pub async fn complete(
        &self,
        upstreams: &Upstreams,
        mut request: CompleteRequestParams,
    ) -> Result<CompleteResult, ErrorData> {
        let server = match &mut request.r#ref {
            Reference::Prompt(prompt) => {
                let known = |d: &Self| {
                    d.prompts
                        .lock()
                        .expect("directory lock")
                        .get(&prompt.name)
                        .cloned()
                };
                let route = match known(self) {
                    Some(r) => Some(r),
                    None => {
                        self.list_prompts(upstreams).await;
                        known(self)
                    }
                };
                let Some((server, name)) = route else {
                    return Err(ErrorData::invalid_params(
                        format!("unknown prompt {:?}", prompt.name),
                        None,
                    ));
                };
                prompt.name = name;
                server
            }
            Reference::Resource(resource) => {
                let uri = resource.uri.clone();
                let server = match self.server_of(&uri) {
                    Some(s) => Some(s),
                    None => {
                        self.list_resources(upstreams).await;
                        self.list_templates(upstreams).await;
                        self.server_of(&uri)
                    }
                };
                server.ok_or_else(|| {
                    ErrorData::invalid_params(format!("no upstream server offers {uri:?}"), None)
                })?
            }
            _ => {
                return Err(ErrorData::invalid_params(
                    "completion/complete: an unknown kind of reference",
                    None,
                ));
            }
        };
        on_lane(upstreams, &server, |peer| async move {
            peer.complete(request).await
        })
        .await
    }

    /// `resources/read`, answered by the server the URI belongs to as is.
    pub async fn read_resource(
        &self,
        upstreams: &Upstreams,
        request: ReadResourceRequestParams,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let server = match self.server_of(&request.uri) {
            Some(s) => Some(s),
            None => {
                self.list_resources(upstreams).await;
                self.list_templates(upstreams).await;
                self.server_of(&request.uri)
            }
        };
        let Some(server) = server else {
            return Err(ErrorData::resource_not_found(
                format!("no upstream server offers {:?}", request.uri),
                None,
            ));
        };
        on_lane(upstreams, &server, |peer| async move {
            peer.read_resource_once(request).await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_is_matched_by_its_literal_start() {
        assert_eq!(
            literal_start("demo://resource/dynamic/text/{id}"),
            "demo://resource/dynamic/text/"
        );
        assert_eq!(literal_start("file:///{path}"), "file:///");
        assert_eq!(literal_start("plain://x"), "plain://x");
        let d = Directory::default();
        *d.templates.lock().unwrap() = vec![
            ("demo://resource/dynamic/text/".into(), "a".into()),
            ("demo://".into(), "b".into()),
        ];
        d.resources
            .lock()
            .unwrap()
            .insert("demo://listed".into(), "c".into());
        assert_eq!(
            d.server_of("demo://resource/dynamic/text/7").as_deref(),
            Some("a")
        );
        assert_eq!(d.server_of("demo://other").as_deref(), Some("b"));
        assert_eq!(d.server_of("demo://listed").as_deref(), Some("c"));
        assert_eq!(
            d.server_of("file:///x"),
            None,
            "no server is known to offer it"
        );
        *d.offering.lock().unwrap() = vec!["only".into()];
        *d.templates.lock().unwrap() = Vec::new();
        assert_eq!(d.server_of("file:///x").as_deref(), Some("only"));
    }
}
