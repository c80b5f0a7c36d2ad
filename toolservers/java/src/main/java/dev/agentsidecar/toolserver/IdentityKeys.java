package dev.agentsidecar.toolserver;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PublicKey;
import java.security.Signature;
import java.security.spec.X509EncodedKeySpec;
import java.util.Arrays;
import java.util.Base64;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The sidecar's public keys, from a JWKS ({@code agent-sidecar identity jwks} prints it: keys by
 * {@code kid}) or from one PEM public key (which takes any {@code kid}). Only the two kinds the
 * sidecar signs with are kept: Ed25519 ({@code EdDSA}) and ECDSA P-256 ({@code ES256}); a JWKS
 * entry of another kind is skipped, since a JWKS may be shared with other signers. Immutable.
 */
final class IdentityKeys {
  static final String EDDSA = "EdDSA";
  static final String ES256 = "ES256";

  // The DER SubjectPublicKeyInfo prefixes of an Ed25519 key and of an uncompressed P-256 point:
  // the raw key follows. Matching them whole names the algorithm and the curve exactly.
  private static final byte[] ED25519_SPKI = HexFormat.of().parseHex("302a300506032b6570032100");
  private static final byte[] P256_SPKI =
      HexFormat.of().parseHex("3059301306072a8648ce3d020106082a8648ce3d03010703420004");
  // P-256 (FIPS 186-4, D.1.2.3): y^2 = x^3 - 3x + b over the field of p.
  private static final BigInteger P = new BigInteger("ffffffff00000001000000000000000000000000ffffffffffffffffffffffff", 16);
  private static final BigInteger B = new BigInteger("5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604b", 16);

  /** One key and the algorithm it signs. */
  record Key(String algorithm, PublicKey publicKey) {
    /** Whether {@code signature} (a JWS signature: raw r||s for ES256) signs {@code input}. */
    boolean verifies(byte[] input, byte[] signature) {
      if (signature.length != 64) { // both algorithms' signatures are 64 bytes
        return false;
      }
      try {
        Signature check = Signature.getInstance(algorithm.equals(EDDSA) ? "Ed25519" : "SHA256withECDSAinP1363Format");
        check.initVerify(publicKey);
        check.update(input);
        return check.verify(signature);
      } catch (GeneralSecurityException | RuntimeException e) {
        return false;
      }
    }
  }

  private final Map<String, Key> byKid;
  private final Key pem;

  private IdentityKeys(Map<String, Key> byKid, Key pem) {
    this.byKid = Map.copyOf(byKid);
    this.pem = pem;
  }

  /** The key {@code kid} names (null: the header has no string kid); null when none. */
  Key find(String kid) {
    if (pem != null) {
      return pem;
    }
    return kid == null ? null : byKid.get(kid);
  }

  int size() {
    return pem != null ? 1 : byKid.size();
  }

  /**
   * Reads {@code file}.
   *
   * @throws IllegalArgumentException it cannot be read, or holds no key the sidecar signs with
   */
  static IdentityKeys load(Path file, ObjectMapper json) {
    byte[] data;
    try {
      data = Files.readAllBytes(file);
    } catch (IOException e) {
      String why = e instanceof java.nio.file.NoSuchFileException ? "no such file" : String.valueOf(e.getMessage());
      throw new IllegalArgumentException("cannot read the identity keys " + file + ": " + why, e);
    }
    IllegalArgumentException unusable = new IllegalArgumentException(file + " holds no usable key: an Ed25519 (EdDSA) or "
        + "ECDSA P-256 (ES256) public key as PEM, or a JWKS as 'agent-sidecar identity jwks' prints it (each key with a kid)");
    String text = new String(data, StandardCharsets.UTF_8).strip();
    if (text.startsWith("-----BEGIN")) {
      Key key = fromPem(text);
      if (key == null) {
        throw unusable;
      }
      return new IdentityKeys(Map.of(), key);
    }
    IdentityKeys keys = jwks(text, json);
    if (keys == null) {
      throw new IllegalArgumentException(file + " is neither a JWKS (a JSON object with \"keys\") nor a PEM key");
    }
    if (keys.size() == 0) {
      throw unusable;
    }
    return keys;
  }

  /**
   * Parses a JWKS fetched from {@code source} (a sidecar's IdentityKeysService), as a keys
   * file's JWKS is parsed.
   *
   * @throws IllegalArgumentException it is no JWKS, or holds no key the sidecar signs with
   */
  static IdentityKeys fromJwks(String text, String source, ObjectMapper json) {
    IdentityKeys keys = jwks(text == null ? "" : text.strip(), json);
    if (keys == null) {
      throw new IllegalArgumentException("the identity keys from " + source + " are not a JWKS (a JSON object with \"keys\")");
    }
    if (keys.size() == 0) {
      throw new IllegalArgumentException("the identity keys from " + source + " hold no usable key: an Ed25519 (EdDSA) "
          + "or ECDSA P-256 (ES256) JWK with a kid");
    }
    return keys;
  }

  /**
   * The keys of a JWKS, by kid: the Ed25519 and P-256 entries with a string kid, others skipped
   * (none may be left); null when {@code text} is no JSON object with "keys".
   */
  private static IdentityKeys jwks(String text, ObjectMapper json) {
    JsonNode keys;
    try {
      keys = json.readTree(text).get("keys");
    } catch (IOException | RuntimeException e) {
      keys = null;
    }
    if (keys == null) {
      return null;
    }
    Map<String, Key> found = new LinkedHashMap<>();
    for (JsonNode jwk : keys.isArray() ? keys : json.createArrayNode()) {
      Key key = jwk.isObject() && jwk.path("kid").isTextual() ? fromJwk(jwk) : null;
      if (key != null) {
        found.put(jwk.get("kid").textValue(), key);
      }
    }
    return new IdentityKeys(found, null);
  }

  /** The key of a PEM {@code PUBLIC KEY} block; null when it is none of the two kinds. */
  private static Key fromPem(String text) {
    String begin = "-----BEGIN PUBLIC KEY-----";
    String end = "-----END PUBLIC KEY-----";
    int from = text.indexOf(begin);
    int to = text.indexOf(end);
    if (from != 0 || to < 0) {
      return null;
    }
    byte[] der;
    try {
      der = Base64.getMimeDecoder().decode(text.substring(begin.length(), to));
    } catch (IllegalArgumentException e) {
      return null;
    }
    if (der.length == ED25519_SPKI.length + 32 && startsWith(der, ED25519_SPKI)) {
      return key(EDDSA, der);
    }
    if (der.length == P256_SPKI.length + 64 && startsWith(der, P256_SPKI)) {
      return onCurve(Arrays.copyOfRange(der, P256_SPKI.length, P256_SPKI.length + 32),
          Arrays.copyOfRange(der, P256_SPKI.length + 32, der.length)) ? key(ES256, der) : null;
    }
    return null;
  }

  /** The key of an OKP Ed25519 or EC P-256 JWK; null for another kind (or a broken one). */
  private static Key fromJwk(JsonNode jwk) {
    String kty = jwk.path("kty").asText("");
    String crv = jwk.path("crv").asText("");
    JsonNode alg = jwk.get("alg");
    if (kty.equals("OKP") && crv.equals("Ed25519") && (alg == null || EDDSA.equals(alg.textValue()))) {
      byte[] x = coordinate(jwk, "x");
      return x == null ? null : key(EDDSA, concat(ED25519_SPKI, x));
    }
    if (kty.equals("EC") && crv.equals("P-256") && (alg == null || ES256.equals(alg.textValue()))) {
      byte[] x = coordinate(jwk, "x");
      byte[] y = coordinate(jwk, "y");
      return x == null || y == null || !onCurve(x, y) ? null : key(ES256, concat(concat(P256_SPKI, x), y));
    }
    return null;
  }

  /** A JWK's 32-byte base64url field; null when absent or of another length. */
  private static byte[] coordinate(JsonNode jwk, String name) {
    JsonNode value = jwk.get(name);
    if (value == null || !value.isTextual()) {
      return null;
    }
    try {
      byte[] bytes = Base64.getUrlDecoder().decode(value.textValue());
      return bytes.length == 32 ? bytes : null;
    } catch (IllegalArgumentException e) {
      return null;
    }
  }

  /** Whether (x, y) is a point of P-256: the JDK does not check a public key's point. */
  private static boolean onCurve(byte[] xBytes, byte[] yBytes) {
    BigInteger x = new BigInteger(1, xBytes);
    BigInteger y = new BigInteger(1, yBytes);
    if (x.compareTo(P) >= 0 || y.compareTo(P) >= 0) {
      return false;
    }
    BigInteger right = x.pow(3).subtract(x.multiply(BigInteger.valueOf(3))).add(B).mod(P);
    return y.pow(2).mod(P).equals(right);
  }

  private static Key key(String algorithm, byte[] spki) {
    try {
      KeyFactory factory = KeyFactory.getInstance(algorithm.equals(EDDSA) ? "Ed25519" : "EC");
      return new Key(algorithm, factory.generatePublic(new X509EncodedKeySpec(spki)));
    } catch (GeneralSecurityException e) {
      return null;
    }
  }

  private static boolean startsWith(byte[] data, byte[] prefix) {
    return Arrays.equals(data, 0, prefix.length, prefix, 0, prefix.length);
  }

  private static byte[] concat(byte[] a, byte[] b) {
    byte[] out = Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, out, a.length, b.length);
    return out;
  }
}
