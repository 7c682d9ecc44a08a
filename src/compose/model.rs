//! The parts of a compose file that decide what dxdp labels mean; everything else is skipped.
//!
//! Hand-written visitors instead of `#[serde(untagged)]`: compose allows two shapes for labels,
//! service networks and `external`, and an untagged enum would replace the parser's
//! "line L, column C" with "did not match any variant". The same visitors read service names
//! and label keys as `Spanned`, so that a problem can name where they are written ([`At`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};

/// Where a service name or a label is written: the line and column (1-based, in characters)
/// of its key, or of its `KEY=VALUE` item in a list, in file `source` of the files merged into
/// one project (0 when there is one file). Through a merge key (`<<: *anchor`) it is where the
/// service uses the anchor, which tells apart the services that share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct At {
    pub source: usize,
    pub line: u64,
    pub column: u64,
}

impl At {
    /// `None` for the parser's "unknown" (line 0), which it gives values serde had to buffer.
    pub(crate) fn of(location: &Location) -> Option<Self> {
        (location.line() > 0).then(|| Self {
            source: 0,
            line: location.line(),
            column: location.column(),
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ComposeFile {
    /// Top-level project name (compose specification; docker-compose 1.x rejects it).
    pub name: Option<String>,
    /// `None` when the key is missing, which makes the file no compose file dxdp can check.
    #[serde(default, deserialize_with = "services_with_places")]
    pub(crate) services: Option<BTreeMap<String, Service>>,
    /// A network may be declared with no body (`front:`), hence the inner `Option`.
    pub(crate) networks: Option<BTreeMap<String, Option<NetworkDef>>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct Service {
    pub(crate) labels: Option<Labels>,
    pub(crate) networks: Option<ServiceNetworks>,
    pub(crate) network_mode: Option<String>,
    pub(crate) container_name: Option<String>,
    /// File format 2.x.
    pub(crate) scale: Option<Scalar>,
    /// File format 3.x.
    pub(crate) deploy: Option<Deploy>,
    /// Where the service's name is written; set from the key by [`services_with_places`].
    #[serde(skip)]
    pub(crate) at: Option<At>,
}

impl ComposeFile {
    /// Where a problem of `service` (under its label `key`, if any) points: the label as it is
    /// written, the last one when the list form repeats it (the one docker-compose keeps), else
    /// the service's name.
    pub(crate) fn at(&self, service: &str, key: Option<&str>) -> Option<At> {
        let svc = self.services.as_ref()?.get(service)?;
        let label = key.and_then(|key| {
            svc.labels
                .iter()
                .flat_map(|l| &l.0)
                .rev()
                .find(|l| l.key == key)
        });
        label.map_or(svc.at, |l| l.at)
    }
}

/// `services:` as a map by name, each service told where its name is written.
fn services_with_places<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, Service>>, D::Error> {
    struct Services(BTreeMap<String, Service>);
    impl<'de> Deserialize<'de> for Services {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Services;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a map of services by name")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Services, A::Error> {
                    let mut out = BTreeMap::new();
                    // The parser refuses a repeated key, so no service replaces another here.
                    while let Some((name, mut svc)) =
                        map.next_entry::<Spanned<String>, Service>()?
                    {
                        svc.at = At::of(&name.referenced);
                        out.insert(name.value, svc);
                    }
                    Ok(Services(out))
                }
            }
            d.deserialize_map(V)
        }
    }
    Ok(Option::<Services>::deserialize(d)?.map(|s| s.0))
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct Deploy {
    pub(crate) replicas: Option<Scalar>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct NetworkDef {
    pub(crate) name: Option<String>,
    pub(crate) external: Option<External>,
    pub(crate) driver: Option<String>,
    pub(crate) driver_opts: Option<BTreeMap<String, Scalar>>,
}

/// `external: true` or the older `external: {name: NAME}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum External {
    Flag(bool),
    Named(Option<String>),
}

/// A YAML scalar as compose passes it on: label values and options may be written unquoted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    Text(String),
    Bool(bool),
    /// In the spelling Rust prints, which for label values dxdp reads is never in doubt.
    Number(String),
    Null,
}

impl Scalar {
    /// The string Docker ends up with. Null becomes empty, as docker-compose passes `key:`
    /// with no value as an empty label.
    pub(crate) fn to_text(&self) -> String {
        match self {
            Self::Text(s) | Self::Number(s) => s.clone(),
            Self::Bool(b) => b.to_string(),
            Self::Null => String::new(),
        }
    }

    /// `Some(n)` for a literal count; `None` for anything else, such as `${REPLICAS}`.
    pub(crate) fn as_count(&self) -> Option<u64> {
        match self {
            Self::Text(s) | Self::Number(s) => s.trim().parse().ok(),
            Self::Bool(_) | Self::Null => None,
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, number, boolean or null")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar::Text(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Number(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::Number(v.to_string()))
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Scalar, E> {
                Ok(Scalar::Number(v.to_string()))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Scalar, E> {
                Ok(Scalar::Number(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Number(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
        }
        d.deserialize_any(V)
    }
}

/// Labels in written order. The list form can repeat a key, which the checker reports, so this
/// is not a map.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Labels(pub Vec<Label>);

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Label {
    pub(crate) key: String,
    pub(crate) value: Scalar,
    pub(crate) at: Option<At>,
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Labels;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of labels or a list of KEY=VALUE strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Labels, A::Error> {
                let mut out = Vec::new();
                while let Some((key, value)) = map.next_entry::<Spanned<String>, Scalar>()? {
                    out.push(Label {
                        at: At::of(&key.referenced),
                        key: key.value,
                        value,
                    });
                }
                Ok(Labels(out))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Labels, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<Spanned<String>>()? {
                    // docker-compose splits at the first `=`; a bare key is an empty label.
                    let (k, v) = item.value.split_once('=').unwrap_or((&item.value, ""));
                    out.push(Label {
                        key: k.to_owned(),
                        value: Scalar::Text(v.to_owned()),
                        at: At::of(&item.referenced),
                    });
                }
                Ok(Labels(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// The compose keys of the networks a service joins, in written order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ServiceNetworks(pub Vec<String>);

impl<'de> Deserialize<'de> for ServiceNetworks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ServiceNetworks;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of network names or a map keyed by network name")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ServiceNetworks, A::Error> {
                let mut out = Vec::new();
                // Aliases, addresses and priorities do not change which networks are shared.
                while let Some((k, IgnoredAny)) = map.next_entry::<String, IgnoredAny>()? {
                    out.push(k);
                }
                Ok(ServiceNetworks(out))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ServiceNetworks, A::Error> {
                let mut out = Vec::new();
                while let Some(k) = seq.next_element::<String>()? {
                    out.push(k);
                }
                Ok(ServiceNetworks(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for External {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Legacy {
            name: Option<String>,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = External;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("true, false or a map with a name")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<External, E> {
                Ok(External::Flag(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<External, A::Error> {
                let legacy = Legacy::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(External::Named(legacy.name))
            }
        }
        d.deserialize_any(V)
    }
}
