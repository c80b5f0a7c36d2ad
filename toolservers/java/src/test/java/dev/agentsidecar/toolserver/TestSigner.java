package dev.agentsidecar.toolserver;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.Signature;
import java.security.interfaces.ECPublicKey;
import java.security.spec.ECGenParameterSpec;
import java.util.Arrays;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Signs identity assertions as the sidecar does, with a key made for the test: Ed25519 (EdDSA)
 * or P-256 (ES256, its signature raw r||s); its public half as a JWKS or a PEM file.
 */
final class TestSigner {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Base64.Encoder BASE64URL = Base64.getUrlEncoder().withoutPadding();

  final String algorithm;
  final String kid;
  private final KeyPair pair;

  private TestSigner(String algorithm, String kid, KeyPair pair) {
    this.algorithm = algorithm;
    this.kid = kid;
    this.pair = pair;
  }

  static TestSigner ed25519(String kid) throws GeneralSecurityException {
    return new TestSigner("EdDSA", kid, KeyPairGenerator.getInstance("Ed25519").generateKeyPair());
  }

  static TestSigner es256(String kid) throws GeneralSecurityException {
    KeyPairGenerator generator = KeyPairGenerator.getInstance("EC");
    generator.initialize(new ECGenParameterSpec("secp256r1"));
    return new TestSigner("ES256", kid, generator.generateKeyPair());
  }

  /** The claims the sidecar signs for alice's run r-1 of session s-1, issued now for 300 s. */
  static Map<String, Object> claims(String audience, long now) {
    Map<String, Object> claims = new LinkedHashMap<>();
    claims.put("iss", "agent-sidecar");
    claims.put("sub", "alice");
    claims.put("aud", audience);
    claims.put("sid", "s-1");
    claims.put("run_id", "r-1");
    claims.put("labels", Map.of("tenant", "acme"));
    claims.put("iat", now);
    claims.put("exp", now + 300);
    claims.put("jti", "j-" + System.nanoTime());
    return claims;
  }

  String sign(Map<String, Object> claims) throws Exception {
    String input = part(Map.of("alg", algorithm, "kid", kid, "typ", "JWT")) + "." + part(claims);
    Signature signer = Signature.getInstance(algorithm.equals("EdDSA") ? "Ed25519" : "SHA256withECDSAinP1363Format");
    signer.initSign(pair.getPrivate());
    signer.update(input.getBytes(StandardCharsets.US_ASCII));
    return input + "." + BASE64URL.encodeToString(signer.sign());
  }

  /** The public key as a JWKS of one key. */
  String jwks() throws Exception {
    Map<String, Object> jwk = new LinkedHashMap<>();
    byte[] spki = pair.getPublic().getEncoded();
    if (algorithm.equals("EdDSA")) {
      jwk.put("kty", "OKP");
      jwk.put("crv", "Ed25519");
      jwk.put("x", BASE64URL.encodeToString(Arrays.copyOfRange(spki, spki.length - 32, spki.length)));
    } else {
      ECPublicKey key = (ECPublicKey) pair.getPublic();
      jwk.put("kty", "EC");
      jwk.put("crv", "P-256");
      jwk.put("x", BASE64URL.encodeToString(fixed(key.getW().getAffineX().toByteArray())));
      jwk.put("y", BASE64URL.encodeToString(fixed(key.getW().getAffineY().toByteArray())));
    }
    jwk.put("kid", kid);
    jwk.put("alg", algorithm);
    jwk.put("use", "sig");
    return JSON.writeValueAsString(Map.of("keys", java.util.List.of(jwk)));
  }

  /** The public key as a PEM file. */
  String pem() {
    return "-----BEGIN PUBLIC KEY-----\n" + Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII))
        .encodeToString(pair.getPublic().getEncoded()) + "\n-----END PUBLIC KEY-----\n";
  }

  private static byte[] fixed(byte[] bigEndian) {
    byte[] out = new byte[32];
    int length = Math.min(32, bigEndian.length);
    System.arraycopy(bigEndian, bigEndian.length - length, out, 32 - length, length);
    return out;
  }

  private static String part(Object value) throws Exception {
    return BASE64URL.encodeToString(JSON.writeValueAsBytes(value));
  }
}
