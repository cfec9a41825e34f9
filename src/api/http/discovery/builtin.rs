//! The built-in resources of kube-apiserver 1.32 with its default feature gates and runtime
//! config: every GA group version it serves, in the order it serves them (`GET /apis` lists
//! groups by priority, and kubectl resolves a resource name that two groups share to the
//! first). Checked against upstream's discovery snapshots, `api/discovery/api__v1.json` and
//! `api/discovery/apis__GROUP__VERSION.json` in kubernetes/kubernetes, leaving out what 1.32
//! serves only behind an alpha gate (`pods/resize`) and what came later
//! (`pods/checkpoint`, `networking.k8s.io/v1` `ipaddresses` and `servicecidrs`,
//! `admissionregistration.k8s.io/v1` mutating admission policies,
//! `certificates.k8s.io/v1` `podcertificaterequests`).
//!
//! A Rust table rather than an embedded YAML or JSON file: the compiler checks every row,
//! nothing is parsed at startup or can fail to parse while serving, and named verb sets keep a
//! row to one line, which reads as well as the YAML would.

/// One group version: its resources in upstream's order (by name, each resource followed by
/// its subresources).
pub struct GroupVersion {
    pub version: &'static str,
    pub resources: &'static [Resource],
}

/// One API group: its versions, the preferred one first (as `GET /apis` lists them).
pub struct Group {
    /// `""` for the core group, served under `/api`.
    pub name: &'static str,
    pub versions: &'static [GroupVersion],
}

/// One resource, as its `APIResource` in an `APIResourceList`. The singular name is upstream's
/// for every built-in resource: the kind in lower case.
pub struct Resource {
    /// The plural name (`deployments`).
    pub name: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub verbs: &'static [&'static str],
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub subresources: &'static [Subresource],
}

/// A subresource, listed as `resource/name` with the namespacing of its resource and no
/// singular name, as upstream lists them.
pub struct Subresource {
    pub name: &'static str,
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
    /// `(group, version)` of its kind when that is another group's (`Scale` is
    /// `autoscaling/v1`); `None` for the containing group version.
    pub kind_group_version: Option<(&'static str, &'static str)>,
}

/// What a stored resource supports; upstream lists verbs sorted.
pub const READ_WRITE: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
/// Namespaces: no `deletecollection`.
const READ_WRITE_ONE_BY_ONE: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];
const CREATE: &[&str] = &["create"];
const GET: &[&str] = &["get"];
const GET_LIST: &[&str] = &["get", "list"];
const UPDATE: &[&str] = &["update"];
/// `status`, `scale`, `approval`, `ephemeralcontainers`.
const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];
/// `attach`, `exec`, `portforward`: a GET upgraded to a stream, or a POST.
const CREATE_GET: &[&str] = &["create", "get"];
/// `proxy`: every method is passed through.
const PROXY: &[&str] = &["create", "delete", "get", "patch", "update"];

const ALL: &[&str] = &["all"];
const API_EXTENSIONS: &[&str] = &["api-extensions"];

const fn namespaced(
    name: &'static str,
    kind: &'static str,
    verbs: &'static [&'static str],
) -> Resource {
    Resource {
        name,
        kind,
        namespaced: true,
        verbs,
        short_names: &[],
        categories: &[],
        subresources: &[],
    }
}

const fn cluster(
    name: &'static str,
    kind: &'static str,
    verbs: &'static [&'static str],
) -> Resource {
    Resource {
        namespaced: false,
        ..namespaced(name, kind, verbs)
    }
}

impl Resource {
    const fn short(self, short_names: &'static [&'static str]) -> Self {
        Self {
            short_names,
            ..self
        }
    }

    const fn categories(self, categories: &'static [&'static str]) -> Self {
        Self { categories, ..self }
    }

    const fn with(self, subresources: &'static [Subresource]) -> Self {
        Self {
            subresources,
            ..self
        }
    }
}

const fn sub(
    name: &'static str,
    kind: &'static str,
    verbs: &'static [&'static str],
) -> Subresource {
    Subresource {
        name,
        kind,
        verbs,
        kind_group_version: None,
    }
}

const fn status(kind: &'static str) -> Subresource {
    sub("status", kind, GET_PATCH_UPDATE)
}

/// `scale`, whose kind is `autoscaling/v1` `Scale` whatever the resource's group.
const SCALE: Subresource = Subresource {
    kind_group_version: Some(("autoscaling", "v1")),
    ..sub("scale", "Scale", GET_PATCH_UPDATE)
};

const fn v1(resources: &'static [Resource]) -> GroupVersion {
    GroupVersion {
        version: "v1",
        resources,
    }
}

const HORIZONTAL_POD_AUTOSCALERS: &[Resource] = &[namespaced(
    "horizontalpodautoscalers",
    "HorizontalPodAutoscaler",
    READ_WRITE,
)
.short(&["hpa"])
.categories(ALL)
.with(&[status("HorizontalPodAutoscaler")])];

/// The core group (`/api/v1`), then every group of `/apis` in upstream's priority order.
pub const GROUPS: &[Group] = &[
    Group {
        name: "",
        versions: &[v1(&[
            namespaced("bindings", "Binding", CREATE),
            cluster("componentstatuses", "ComponentStatus", GET_LIST).short(&["cs"]),
            namespaced("configmaps", "ConfigMap", READ_WRITE).short(&["cm"]),
            namespaced("endpoints", "Endpoints", READ_WRITE).short(&["ep"]),
            namespaced("events", "Event", READ_WRITE).short(&["ev"]),
            namespaced("limitranges", "LimitRange", READ_WRITE).short(&["limits"]),
            cluster("namespaces", "Namespace", READ_WRITE_ONE_BY_ONE)
                .short(&["ns"])
                .with(&[sub("finalize", "Namespace", UPDATE), status("Namespace")]),
            cluster("nodes", "Node", READ_WRITE)
                .short(&["no"])
                .with(&[sub("proxy", "NodeProxyOptions", PROXY), status("Node")]),
            namespaced(
                "persistentvolumeclaims",
                "PersistentVolumeClaim",
                READ_WRITE,
            )
            .short(&["pvc"])
            .with(&[status("PersistentVolumeClaim")]),
            cluster("persistentvolumes", "PersistentVolume", READ_WRITE)
                .short(&["pv"])
                .with(&[status("PersistentVolume")]),
            namespaced("pods", "Pod", READ_WRITE)
                .short(&["po"])
                .categories(ALL)
                .with(&[
                    sub("attach", "PodAttachOptions", CREATE_GET),
                    sub("binding", "Binding", CREATE),
                    sub("ephemeralcontainers", "Pod", GET_PATCH_UPDATE),
                    Subresource {
                        kind_group_version: Some(("policy", "v1")),
                        ..sub("eviction", "Eviction", CREATE)
                    },
                    sub("exec", "PodExecOptions", CREATE_GET),
                    sub("log", "Pod", GET),
                    sub("portforward", "PodPortForwardOptions", CREATE_GET),
                    sub("proxy", "PodProxyOptions", PROXY),
                    status("Pod"),
                ]),
            namespaced("podtemplates", "PodTemplate", READ_WRITE),
            namespaced(
                "replicationcontrollers",
                "ReplicationController",
                READ_WRITE,
            )
            .short(&["rc"])
            .categories(ALL)
            .with(&[SCALE, status("ReplicationController")]),
            namespaced("resourcequotas", "ResourceQuota", READ_WRITE)
                .short(&["quota"])
                .with(&[status("ResourceQuota")]),
            namespaced("secrets", "Secret", READ_WRITE),
            namespaced("serviceaccounts", "ServiceAccount", READ_WRITE)
                .short(&["sa"])
                .with(&[Subresource {
                    kind_group_version: Some(("authentication.k8s.io", "v1")),
                    ..sub("token", "TokenRequest", CREATE)
                }]),
            namespaced("services", "Service", READ_WRITE)
                .short(&["svc"])
                .categories(ALL)
                .with(&[
                    sub("proxy", "ServiceProxyOptions", PROXY),
                    status("Service"),
                ]),
        ])],
    },
    Group {
        name: "apiregistration.k8s.io",
        versions: &[v1(&[cluster("apiservices", "APIService", READ_WRITE)
            .categories(API_EXTENSIONS)
            .with(&[status("APIService")])])],
    },
    Group {
        name: "apps",
        versions: &[v1(&[
            namespaced("controllerrevisions", "ControllerRevision", READ_WRITE),
            namespaced("daemonsets", "DaemonSet", READ_WRITE)
                .short(&["ds"])
                .categories(ALL)
                .with(&[status("DaemonSet")]),
            namespaced("deployments", "Deployment", READ_WRITE)
                .short(&["deploy"])
                .categories(ALL)
                .with(&[SCALE, status("Deployment")]),
            namespaced("replicasets", "ReplicaSet", READ_WRITE)
                .short(&["rs"])
                .categories(ALL)
                .with(&[SCALE, status("ReplicaSet")]),
            namespaced("statefulsets", "StatefulSet", READ_WRITE)
                .short(&["sts"])
                .categories(ALL)
                .with(&[SCALE, status("StatefulSet")]),
        ])],
    },
    Group {
        name: "events.k8s.io",
        versions: &[v1(&[
            namespaced("events", "Event", READ_WRITE).short(&["ev"])
        ])],
    },
    Group {
        name: "authentication.k8s.io",
        versions: &[v1(&[
            cluster("selfsubjectreviews", "SelfSubjectReview", CREATE),
            cluster("tokenreviews", "TokenReview", CREATE),
        ])],
    },
    Group {
        name: "authorization.k8s.io",
        versions: &[v1(&[
            namespaced(
                "localsubjectaccessreviews",
                "LocalSubjectAccessReview",
                CREATE,
            ),
            cluster(
                "selfsubjectaccessreviews",
                "SelfSubjectAccessReview",
                CREATE,
            ),
            cluster("selfsubjectrulesreviews", "SelfSubjectRulesReview", CREATE),
            cluster("subjectaccessreviews", "SubjectAccessReview", CREATE),
        ])],
    },
    Group {
        name: "autoscaling",
        versions: &[
            GroupVersion {
                version: "v2",
                resources: HORIZONTAL_POD_AUTOSCALERS,
            },
            v1(HORIZONTAL_POD_AUTOSCALERS),
        ],
    },
    Group {
        name: "batch",
        versions: &[v1(&[
            namespaced("cronjobs", "CronJob", READ_WRITE)
                .short(&["cj"])
                .categories(ALL)
                .with(&[status("CronJob")]),
            namespaced("jobs", "Job", READ_WRITE)
                .categories(ALL)
                .with(&[status("Job")]),
        ])],
    },
    Group {
        name: "certificates.k8s.io",
        versions: &[v1(&[cluster(
            "certificatesigningrequests",
            "CertificateSigningRequest",
            READ_WRITE,
        )
        .short(&["csr"])
        .with(&[
            sub("approval", "CertificateSigningRequest", GET_PATCH_UPDATE),
            status("CertificateSigningRequest"),
        ])])],
    },
    Group {
        name: "networking.k8s.io",
        versions: &[v1(&[
            cluster("ingressclasses", "IngressClass", READ_WRITE),
            namespaced("ingresses", "Ingress", READ_WRITE)
                .short(&["ing"])
                .with(&[status("Ingress")]),
            namespaced("networkpolicies", "NetworkPolicy", READ_WRITE).short(&["netpol"]),
        ])],
    },
    Group {
        name: "policy",
        versions: &[v1(&[namespaced(
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            READ_WRITE,
        )
        .short(&["pdb"])
        .with(&[status("PodDisruptionBudget")])])],
    },
    Group {
        name: "rbac.authorization.k8s.io",
        versions: &[v1(&[
            cluster("clusterrolebindings", "ClusterRoleBinding", READ_WRITE),
            cluster("clusterroles", "ClusterRole", READ_WRITE),
            namespaced("rolebindings", "RoleBinding", READ_WRITE),
            namespaced("roles", "Role", READ_WRITE),
        ])],
    },
    Group {
        name: "storage.k8s.io",
        versions: &[v1(&[
            cluster("csidrivers", "CSIDriver", READ_WRITE),
            cluster("csinodes", "CSINode", READ_WRITE),
            namespaced("csistoragecapacities", "CSIStorageCapacity", READ_WRITE),
            cluster("storageclasses", "StorageClass", READ_WRITE).short(&["sc"]),
            cluster("volumeattachments", "VolumeAttachment", READ_WRITE)
                .with(&[status("VolumeAttachment")]),
        ])],
    },
    Group {
        name: "admissionregistration.k8s.io",
        versions: &[v1(&[
            cluster(
                "mutatingwebhookconfigurations",
                "MutatingWebhookConfiguration",
                READ_WRITE,
            )
            .categories(API_EXTENSIONS),
            cluster(
                "validatingadmissionpolicies",
                "ValidatingAdmissionPolicy",
                READ_WRITE,
            )
            .categories(API_EXTENSIONS)
            .with(&[status("ValidatingAdmissionPolicy")]),
            cluster(
                "validatingadmissionpolicybindings",
                "ValidatingAdmissionPolicyBinding",
                READ_WRITE,
            )
            .categories(API_EXTENSIONS),
            cluster(
                "validatingwebhookconfigurations",
                "ValidatingWebhookConfiguration",
                READ_WRITE,
            )
            .categories(API_EXTENSIONS),
        ])],
    },
    Group {
        name: "apiextensions.k8s.io",
        versions: &[v1(&[cluster(
            "customresourcedefinitions",
            "CustomResourceDefinition",
            READ_WRITE,
        )
        .short(&["crd", "crds"])
        .categories(API_EXTENSIONS)
        .with(&[status("CustomResourceDefinition")])])],
    },
    Group {
        name: "scheduling.k8s.io",
        versions: &[v1(&[cluster(
            "priorityclasses",
            "PriorityClass",
            READ_WRITE,
        )
        .short(&["pc"])])],
    },
    Group {
        name: "coordination.k8s.io",
        versions: &[v1(&[namespaced("leases", "Lease", READ_WRITE)])],
    },
    Group {
        name: "node.k8s.io",
        versions: &[v1(&[cluster("runtimeclasses", "RuntimeClass", READ_WRITE)])],
    },
    Group {
        name: "discovery.k8s.io",
        versions: &[v1(&[namespaced(
            "endpointslices",
            "EndpointSlice",
            READ_WRITE,
        )])],
    },
    Group {
        name: "flowcontrol.apiserver.k8s.io",
        versions: &[v1(&[
            cluster("flowschemas", "FlowSchema", READ_WRITE).with(&[status("FlowSchema")]),
            cluster(
                "prioritylevelconfigurations",
                "PriorityLevelConfiguration",
                READ_WRITE,
            )
            .with(&[status("PriorityLevelConfiguration")]),
        ])],
    },
];
