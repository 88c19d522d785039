//! Sealing credentials at rest: ChaCha20-Poly1305 (ring's AEAD) under a
//! 256-bit key the operator supplies (`MCPTASK_SECRET_KEY`, or a key file).
//! A sealed blob is `version byte ‖ 12-byte random nonce ‖ ciphertext+tag`;
//! the server name is the associated data, so a blob copied onto another
//! server's row does not open.

use base64::Engine as _;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

const VERSION: u8 = 1;

/// The key that seals stored OAuth credentials.
#[derive(Clone)]
pub struct SecretKey {
    bytes: [u8; 32],
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(…)")
    }
}

/// Why a key or a sealed blob was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The key text is not 32 bytes of base64 (or 64 hex digits).
    #[error(
        "the secret key must be 32 random bytes, base64 (44 characters) or hex (64 digits); generate one with `mcptask config init` or `openssl rand -base64 32`"
    )]
    BadKey,
    /// The blob does not open under this key (another key, or tampered).
    #[error(
        "stored OAuth credentials do not open with this secret key (was MCPTASK_SECRET_KEY changed?); run `mcptask login` again or restore the key"
    )]
    WrongKey,
    /// The random source failed.
    #[error("no randomness available to seal credentials")]
    NoRandom,
}

impl SecretKey {
    /// A fresh random key.
    pub fn generate() -> Result<Self, SealError> {
        let mut bytes = [0u8; 32];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| SealError::NoRandom)?;
        Ok(Self { bytes })
    }

    /// Parse base64 (standard or URL-safe, padded or not) or 64 hex digits.
    pub fn parse(text: &str) -> Result<Self, SealError> {
        let text = text.trim();
        let decoded = if text.len() == 64 && text.chars().all(|c| c.is_ascii_hexdigit()) {
            (0..32)
                .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
                .collect::<Result<Vec<u8>, _>>()
                .ok()
        } else {
            let engines = [
                base64::engine::general_purpose::STANDARD,
                base64::engine::general_purpose::STANDARD_NO_PAD,
                base64::engine::general_purpose::URL_SAFE,
                base64::engine::general_purpose::URL_SAFE_NO_PAD,
            ];
            engines.iter().find_map(|e| e.decode(text).ok())
        };
        let bytes: [u8; 32] = decoded
            .and_then(|v| v.try_into().ok())
            .ok_or(SealError::BadKey)?;
        Ok(Self { bytes })
    }

    /// The key as base64 text (what [`SecretKey::parse`] reads).
    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.bytes)
    }

    fn aead(&self) -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &self.bytes).expect("a 32-byte key"))
    }

    /// Encrypt and authenticate `plain`, bound to `context` (the server name).
    pub fn seal(&self, context: &str, plain: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::NoRandom)?;
        let mut data = plain.to_vec();
        self.aead()
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context.as_bytes()),
                &mut data,
            )
            .map_err(|_| SealError::NoRandom)?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + data.len());
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&data);
        Ok(out)
    }

    /// Open a blob [`SecretKey::seal`] made for `context`.
    pub fn open(&self, context: &str, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        if sealed.len() < 1 + NONCE_LEN || sealed[0] != VERSION {
            return Err(SealError::WrongKey);
        }
        let nonce: [u8; NONCE_LEN] = sealed[1..1 + NONCE_LEN].try_into().expect("nonce length");
        let mut data = sealed[1 + NONCE_LEN..].to_vec();
        let plain = self
            .aead()
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context.as_bytes()),
                &mut data,
            )
            .map_err(|_| SealError::WrongKey)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_blob_opens_only_with_its_key_and_server() {
        let key = SecretKey::generate().unwrap();
        let sealed = key.seal("reports", b"access-token-123").unwrap();
        assert!(
            !sealed
                .windows(b"access-token-123".len())
                .any(|w| w == b"access-token-123"),
            "the token is not readable in the blob"
        );
        assert_eq!(key.open("reports", &sealed).unwrap(), b"access-token-123");
        assert_eq!(key.open("other", &sealed), Err(SealError::WrongKey));
        let other = SecretKey::generate().unwrap();
        assert_eq!(other.open("reports", &sealed), Err(SealError::WrongKey));
        let mut tampered = sealed.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert_eq!(key.open("reports", &tampered), Err(SealError::WrongKey));
    }

    #[test]
    fn keys_parse_from_base64_and_hex() {
        let key = SecretKey::generate().unwrap();
        let again = SecretKey::parse(&key.to_base64()).unwrap();
        assert_eq!(again.bytes, key.bytes);
        let hex: String = key.bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(SecretKey::parse(&hex).unwrap().bytes, key.bytes);
        assert_eq!(SecretKey::parse("short").unwrap_err(), SealError::BadKey);
    }
}
