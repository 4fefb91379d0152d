//! The product's `proto/cri-subset.proto` against the upstream CRI definition (k8s.io/cri-api
//! api.proto, compiled by build.rs from the Debian package): every message, field, enum value
//! and RPC of the subset must exist upstream with the same number, type and cardinality, and
//! values encoded by one side decode to the same values on the other.

use std::collections::HashMap;

use kata_live::cri::proto as product;
use kata_live_standins::cri_api as upstream;
use prost::Message;
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorSet};

fn set(bytes: &[u8]) -> FileDescriptorSet {
    FileDescriptorSet::decode(bytes).expect("descriptor set")
}

/// Every message and enum of package runtime.v1 by full name (nested ones included).
#[derive(Default)]
struct Index {
    messages: HashMap<String, DescriptorProto>,
    enums: HashMap<String, EnumDescriptorProto>,
}

fn index(fds: &FileDescriptorSet) -> (Index, Vec<prost_types::ServiceDescriptorProto>) {
    fn walk(ix: &mut Index, prefix: &str, m: &DescriptorProto) {
        let name = format!("{prefix}.{}", m.name());
        for e in &m.enum_type {
            ix.enums.insert(format!("{name}.{}", e.name()), e.clone());
        }
        for n in &m.nested_type {
            walk(ix, &name, n);
        }
        ix.messages.insert(name, m.clone());
    }
    let mut ix = Index::default();
    let mut services = Vec::new();
    for f in fds.file.iter().filter(|f| f.package() == "runtime.v1") {
        for m in &f.message_type {
            walk(&mut ix, ".runtime.v1", m);
        }
        for e in &f.enum_type {
            ix.enums
                .insert(format!(".runtime.v1.{}", e.name()), e.clone());
        }
        services.extend(f.service.iter().cloned());
    }
    (ix, services)
}

#[test]
fn every_subset_field_enum_value_and_rpc_matches_upstream() {
    let (sub, sub_services) = index(&set(upstream::SUBSET_DESCRIPTOR));
    let (up, up_services) = index(&set(upstream::UPSTREAM_DESCRIPTOR));
    assert!(sub.messages.len() > 30, "subset looks empty");
    let mut problems = Vec::new();
    for (name, m) in &sub.messages {
        let Some(u) = up.messages.get(name) else {
            problems.push(format!("message {name} is not upstream"));
            continue;
        };
        for f in &m.field {
            match u.field.iter().find(|uf| uf.number() == f.number()) {
                None => problems.push(format!(
                    "{name}.{} = {}: no upstream field has that number",
                    f.name(),
                    f.number()
                )),
                Some(uf) => {
                    let mine = (f.name(), f.r#type(), f.label(), f.type_name());
                    let theirs = (uf.name(), uf.r#type(), uf.label(), uf.type_name());
                    if mine != theirs {
                        problems.push(format!(
                            "{name} field {}: subset {mine:?}, upstream {theirs:?}",
                            f.number()
                        ));
                    }
                }
            }
        }
    }
    for (name, e) in &sub.enums {
        let Some(u) = up.enums.get(name) else {
            problems.push(format!("enum {name} is not upstream"));
            continue;
        };
        for v in &e.value {
            if !u
                .value
                .iter()
                .any(|uv| uv.name() == v.name() && uv.number() == v.number())
            {
                problems.push(format!(
                    "{name}.{} = {}: not upstream",
                    v.name(),
                    v.number()
                ));
            }
        }
    }
    for s in &sub_services {
        let Some(us) = up_services.iter().find(|u| u.name() == s.name()) else {
            problems.push(format!("service {} is not upstream", s.name()));
            continue;
        };
        for m in &s.method {
            let same = us.method.iter().any(|um| {
                um.name() == m.name()
                    && um.input_type() == m.input_type()
                    && um.output_type() == m.output_type()
            });
            if !same {
                problems.push(format!("rpc {}.{} differs upstream", s.name(), m.name()));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "proto/cri-subset.proto disagrees with upstream api.proto:\n{}",
        problems.join("\n")
    );
}

/// product → upstream → product: every value survives both decoders.
fn round_trip<P, U>(value: P)
where
    P: Message + Default + PartialEq + std::fmt::Debug,
    U: Message + Default,
{
    let up =
        U::decode(value.encode_to_vec().as_slice()).expect("upstream decodes the product's bytes");
    let back =
        P::decode(up.encode_to_vec().as_slice()).expect("the product decodes upstream's bytes");
    assert_eq!(back, value);
}

fn labels() -> HashMap<String, String> {
    HashMap::from([("io.kubernetes.pod.name".into(), "web".into())])
}

#[test]
fn messages_the_product_reads_and_writes_survive_both_decoders() {
    let meta = product::PodSandboxMetadata {
        name: "web".into(),
        uid: "u-1".into(),
        namespace: "shop".into(),
        attempt: 3,
    };
    round_trip::<_, upstream::ListPodSandboxResponse>(product::ListPodSandboxResponse {
        items: vec![product::PodSandbox {
            id: "a".repeat(64),
            metadata: Some(meta.clone()),
            state: product::PodSandboxState::SandboxNotready as i32,
            created_at: 1_700_000_000_123_456_789,
            labels: labels(),
            annotations: labels(),
            runtime_handler: "kata-remote".into(),
        }],
    });
    round_trip::<_, upstream::ListContainersResponse>(product::ListContainersResponse {
        containers: vec![product::Container {
            id: "c".repeat(64),
            pod_sandbox_id: "a".repeat(64),
            metadata: Some(product::ContainerMetadata {
                name: "app".into(),
                attempt: 2,
            }),
            image: Some(product::ImageSpec {
                image: "registry.example/app:1".into(),
                annotations: labels(),
            }),
            image_ref: "sha256:00".into(),
            state: product::ContainerState::ContainerExited as i32,
            created_at: 42,
            labels: labels(),
            annotations: labels(),
        }],
    });
    round_trip::<_, upstream::StatusResponse>(product::StatusResponse {
        status: Some(product::RuntimeStatus {
            conditions: vec![product::RuntimeCondition {
                r#type: "RuntimeReady".into(),
                status: true,
                reason: "r".into(),
                message: "m".into(),
            }],
        }),
        info: labels(),
        runtime_handlers: vec![product::RuntimeHandler {
            name: "kata-remote".into(),
            features: Some(product::RuntimeHandlerFeatures {
                recursive_read_only_mounts: true,
                user_namespaces: true,
            }),
        }],
    });
    round_trip::<_, upstream::VersionResponse>(product::VersionResponse {
        version: "0.1.0".into(),
        runtime_name: "cri-o".into(),
        runtime_version: "1.31.0".into(),
        runtime_api_version: "v1".into(),
    });
    round_trip::<_, upstream::PodSandboxStatusResponse>(product::PodSandboxStatusResponse {
        status: Some(product::PodSandboxStatus {
            id: "a".repeat(64),
            metadata: Some(meta.clone()),
            state: product::PodSandboxState::SandboxReady as i32,
            created_at: 7,
            network: Some(product::PodSandboxNetworkStatus {
                ip: "10.128.0.10".into(),
            }),
            labels: labels(),
            annotations: labels(),
            runtime_handler: "kata-remote".into(),
        }),
        info: labels(),
    });
    // What the canary sends: decoded by upstream exactly as meant.
    let run = product::RunPodSandboxRequest {
        config: Some(product::PodSandboxConfig {
            metadata: Some(meta),
            hostname: "canary".into(),
            log_directory: "/var/log/pods/x".into(),
            labels: labels(),
            annotations: labels(),
            linux: Some(product::LinuxPodSandboxConfig {
                security_context: Some(product::LinuxSandboxSecurityContext {
                    namespace_options: Some(product::NamespaceOption {
                        network: product::NamespaceMode::Node as i32,
                        pid: product::NamespaceMode::Pod as i32,
                        ipc: product::NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        runtime_handler: "kata-remote".into(),
    };
    round_trip::<_, upstream::RunPodSandboxRequest>(run.clone());
    let up = upstream::RunPodSandboxRequest::decode(run.encode_to_vec().as_slice()).unwrap();
    let ns = up
        .config
        .and_then(|c| c.linux)
        .and_then(|l| l.security_context)
        .and_then(|s| s.namespace_options)
        .unwrap();
    assert_eq!(ns.network(), upstream::NamespaceMode::Node);
    assert_eq!(up.runtime_handler, "kata-remote");
}
