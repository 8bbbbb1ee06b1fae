//! Who a request is: the administrator (the service's bearer token, or an
//! open service), or a principal whose JSON Web Token the service verifies
//! (HS256 with a shared secret, RS256 or ES256 with the public keys of a
//! JWKS file) and whose groups claim names the labels it may read
//! ([`crate::reader`]). Anything else is refused: 401.

use std::path::Path;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde_json::Value;

use crate::reader::Reader;

/// The claim a principal's groups are in unless told otherwise.
pub const DEFAULT_GROUPS_CLAIM: &str = "groups";

/// Longest token verified: a header's worth, so a request cannot make the
/// service parse megabytes of JSON before the signature is checked.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// How tokens are verified: the keys, the issuer and audience they must
/// name, and the claim their groups are in.
#[derive(Clone)]
pub struct TokenRules {
    keys: Vec<VerifyingKey>,
    issuer: Option<String>,
    audience: Option<String>,
    groups_claim: String,
}

impl std::fmt::Debug for TokenRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenRules")
            .field("keys", &self.keys.len())
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("groups_claim", &self.groups_claim)
            .finish()
    }
}

/// One key a token may be signed with.
#[derive(Clone)]
struct VerifyingKey {
    algorithm: Algorithm,
    /// The JWKS key id; a token naming one is checked against its key only.
    kid: Option<String>,
    key: DecodingKey,
}

/// What the operator gave the service to verify tokens with.
#[derive(Debug, Clone, Default)]
pub struct TokenSources<'a> {
    pub hs256_secret_file: Option<&'a Path>,
    pub jwks_file: Option<&'a Path>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub groups_claim: Option<String>,
}

/// Why the token rules could not be made: the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("cannot read {flag} {path}: {cause}")]
    Unreadable {
        flag: &'static str,
        path: String,
        cause: std::io::Error,
    },
    #[error("{flag} {path}: {message}")]
    Invalid {
        flag: &'static str,
        path: String,
        message: String,
    },
}

/// Why a token was refused: what the 401 says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid: {0}")]
    Invalid(String),
}

impl TokenRules {
    /// The rules from the operator's files, or none when no key was given.
    pub fn from_sources(sources: TokenSources<'_>) -> Result<Option<TokenRules>, RulesError> {
        let mut keys = Vec::new();
        if let Some(path) = sources.hs256_secret_file {
            let flag = "--jwt-hs256-secret-file";
            let secret = read(flag, path)?;
            // A trailing newline is the editor's, not the secret's.
            let secret = secret.trim_ascii_end();
            // RFC 7518 §3.2: a key at least as long as the hash.
            if secret.len() < 32 {
                return Err(invalid(flag, path, "the secret is shorter than 32 bytes"));
            }
            keys.push(VerifyingKey {
                algorithm: Algorithm::HS256,
                kid: None,
                key: DecodingKey::from_secret(secret),
            });
        }
        if let Some(path) = sources.jwks_file {
            let flag = "--jwks-file";
            let set: JwkSet = serde_json::from_slice(&read(flag, path)?)
                .map_err(|e| invalid(flag, path, &format!("not a JWK set: {e}")))?;
            for jwk in &set.keys {
                let kid = jwk.common.key_id.clone();
                let named = || kid.as_deref().unwrap_or("(no kid)").to_string();
                let algorithm = match &jwk.algorithm {
                    AlgorithmParameters::RSA(_) => Algorithm::RS256,
                    AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
                        Algorithm::ES256
                    }
                    _ => {
                        let message = format!("key {} is neither RSA nor EC P-256", named());
                        return Err(invalid(flag, path, &message));
                    }
                };
                let key = DecodingKey::from_jwk(jwk)
                    .map_err(|e| invalid(flag, path, &format!("key {}: {e}", named())))?;
                keys.push(VerifyingKey {
                    algorithm,
                    kid,
                    key,
                });
            }
            if set.keys.is_empty() {
                return Err(invalid(flag, path, "the set has no keys"));
            }
        }
        if keys.is_empty() {
            return Ok(None);
        }
        Ok(Some(TokenRules {
            keys,
            issuer: sources.issuer,
            audience: sources.audience,
            groups_claim: (sources.groups_claim).unwrap_or_else(|| DEFAULT_GROUPS_CLAIM.into()),
        }))
    }

    /// The principal `token` names, once its signature, expiry (and
    /// not-before), issuer and audience hold.
    pub fn verify(&self, token: &str) -> Result<Reader, Refused> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refused::Invalid(format!(
                "longer than {MAX_TOKEN_BYTES} bytes"
            )));
        }
        let header = decode_header(token).map_err(|e| Refused::Invalid(e.to_string()))?;
        let mut candidates = (self.keys.iter())
            .filter(|k| k.algorithm == header.alg)
            .filter(|k| header.kid.is_none() || k.kid.is_none() || k.kid == header.kid)
            .peekable();
        if candidates.peek().is_none() {
            return Err(Refused::Invalid(format!(
                "no key of this service verifies {:?}{}",
                header.alg,
                header
                    .kid
                    .map(|k| format!(" key {k:?}"))
                    .unwrap_or_default()
            )));
        }
        let mut refused = Refused::Invalid("InvalidSignature".into());
        for key in candidates {
            match decode::<Value>(token, &key.key, &self.validation(key.algorithm)) {
                Ok(verified) => return self.reader(&verified.claims),
                Err(e) => {
                    refused = match e.kind() {
                        jsonwebtoken::errors::ErrorKind::ExpiredSignature => Refused::Expired,
                        _ => Refused::Invalid(e.to_string()),
                    };
                }
            }
        }
        Err(refused)
    }

    fn validation(&self, algorithm: Algorithm) -> Validation {
        let mut validation = Validation::new(algorithm);
        validation.validate_nbf = true;
        match &self.audience {
            Some(audience) => validation.set_audience(&[audience]),
            None => validation.validate_aud = false,
        }
        if let Some(issuer) = &self.issuer {
            validation.set_issuer(&[issuer]);
        }
        validation
    }

    /// The reader of a verified token's groups: a list of strings, or one
    /// string; a token without the claim reads nothing.
    fn reader(&self, claims: &Value) -> Result<Reader, Refused> {
        let claim = &self.groups_claim;
        let groups: Vec<&str> = match claims.get(claim) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(group)) => vec![group.as_str()],
            Some(Value::Array(groups)) => (groups.iter())
                .map(|g| g.as_str())
                .collect::<Option<_>>()
                .ok_or_else(|| Refused::Invalid(format!("claim {claim:?} holds a non-string")))?,
            Some(_) => {
                return Err(Refused::Invalid(format!(
                    "claim {claim:?} is neither a list nor a string"
                )));
            }
        };
        Reader::groups(groups).map_err(|e| Refused::Invalid(format!("claim {claim:?}: {e}")))
    }
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, RulesError> {
    std::fs::read(path).map_err(|cause| RulesError::Unreadable {
        flag,
        path: path.display().to_string(),
        cause,
    })
}

fn invalid(flag: &'static str, path: &Path, message: &str) -> RulesError {
    RulesError::Invalid {
        flag,
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    const SECRET: &[u8] = b"a shared secret of at least thirty-two bytes";

    fn rules(dir: &Path) -> TokenRules {
        let secret = dir.join("secret");
        std::fs::write(&secret, [SECRET, b"\n"].concat()).unwrap();
        let sources = TokenSources {
            hs256_secret_file: Some(&secret),
            issuer: Some("https://id.example".into()),
            audience: Some("memweave".into()),
            ..Default::default()
        };
        TokenRules::from_sources(sources).unwrap().unwrap()
    }

    fn token(claims: &Value, secret: &[u8]) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret),
        )
        .unwrap()
    }

    fn now() -> u64 {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        since.unwrap().as_secs()
    }

    #[test]
    fn a_token_is_its_groups_once_everything_it_says_holds() {
        let dir = tempfile::tempdir().unwrap();
        let rules = rules(dir.path());
        let good = json!({"iss": "https://id.example", "aud": "memweave",
            "exp": now() + 600, "groups": ["tenant-a", "shared"]});
        let reader = rules.verify(&token(&good, SECRET)).unwrap();
        assert_eq!(
            reader.group_names(),
            Some(&["shared".into(), "tenant-a".into()][..])
        );
        let with = |change: Value| {
            let mut claims = good.clone();
            claims
                .as_object_mut()
                .unwrap()
                .extend(change.as_object().unwrap().clone());
            token(&claims, SECRET)
        };
        assert_eq!(
            rules.verify(&with(json!({"exp": now() - 3600}))),
            Err(Refused::Expired)
        );
        for bad in [
            with(json!({"iss": "https://elsewhere"})),
            with(json!({"aud": "another"})),
            with(json!({"nbf": now() + 3600})),
            with(json!({"groups": [1]})),
            with(json!({"groups": ["a,b"]})),
            token(&good, b"another secret, also thirty-two bytes long"),
            "not.a.token".to_string(),
        ] {
            assert!(
                matches!(rules.verify(&bad), Err(Refused::Invalid(_))),
                "{bad}"
            );
        }
        // An unsigned token is never taken.
        let unsigned = format!(
            "{}.{}.",
            base64_url(r#"{"alg":"none","typ":"JWT"}"#),
            base64_url(&good.to_string())
        );
        assert!(rules.verify(&unsigned).is_err());
        // No claim, no groups: a principal who reads nothing.
        let mut none = good.clone();
        none.as_object_mut().unwrap().remove("groups");
        let nobody = rules.verify(&token(&none, SECRET)).unwrap();
        assert_eq!(nobody, Reader::nobody());
    }

    #[test]
    fn bad_key_files_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, "too short").unwrap();
        let jwks = dir.path().join("jwks.json");
        std::fs::write(&jwks, r#"{"keys": []}"#).unwrap();
        for (sources, said) in [
            (
                TokenSources {
                    hs256_secret_file: Some(&short),
                    ..Default::default()
                },
                "--jwt-hs256-secret-file",
            ),
            (
                TokenSources {
                    jwks_file: Some(&jwks),
                    ..Default::default()
                },
                "--jwks-file",
            ),
            (
                TokenSources {
                    jwks_file: Some(&dir.path().join("absent")),
                    ..Default::default()
                },
                "cannot read --jwks-file",
            ),
        ] {
            let refused = TokenRules::from_sources(sources).unwrap_err().to_string();
            assert!(refused.contains(said), "{refused}");
        }
        assert!(
            TokenRules::from_sources(TokenSources::default())
                .unwrap()
                .is_none()
        );
    }

    fn base64_url(text: &str) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let bytes = text.as_bytes();
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n =
                chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }
}
