//! The test certificate authority: a fresh CA per test (rcgen), leaf certificates for servers
//! (DNS names or IP addresses) and clients (a common name and organizations, as Kubernetes reads
//! a client certificate's user and groups).

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

pub struct Ca {
    /// The CA certificate (PEM), for a trust store or a `--client-ca-file`.
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A leaf certificate: its PEM, its key's PEM and its DER.
pub struct Leaf {
    pub pem: String,
    pub key_pem: String,
    pub der: Vec<u8>,
}

impl Leaf {
    /// `(certificate PEM, key PEM)`.
    pub fn pem_pair(&self) -> (String, String) {
        (self.pem.clone(), self.key_pem.clone())
    }
}

impl Ca {
    /// A self-signed CA named `name` (its common name).
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf signed by this CA: `names` (DNS names or IP addresses) for a server, CN and O
    /// (at most two organizations) for a client.
    pub fn leaf(&self, names: &[&str], common_name: &str, organizations: &[&str]) -> Leaf {
        self.leaf_with_common_names(names, &[common_name], organizations)
    }

    /// [`Ca::leaf`] whose subject holds every one of `common_names` (at most two), in order,
    /// then the organizations: `/CN=root/CN=eve/O=ops`, as a hostile CSR would ask.
    pub fn leaf_with_common_names(
        &self,
        names: &[&str],
        common_names: &[&str],
        organizations: &[&str],
    ) -> Leaf {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        // rcgen keeps one value per attribute type, so a second CN or O goes in under its OID
        // spelled as a custom type (2.5.4.3, 2.5.4.10): on the wire, two attributes of a type.
        let seconds = |first: DnType, oid: u64| [first, DnType::CustomDnType(vec![2, 5, 4, oid])];
        assert!(common_names.len() <= 2, "at most two common names");
        for (cn, dn_type) in common_names.iter().zip(seconds(DnType::CommonName, 3)) {
            params.distinguished_name.push(dn_type, *cn);
        }
        assert!(organizations.len() <= 2, "at most two organizations");
        for (o, dn_type) in organizations
            .iter()
            .zip(seconds(DnType::OrganizationName, 10))
        {
            params.distinguished_name.push(dn_type, *o);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}
