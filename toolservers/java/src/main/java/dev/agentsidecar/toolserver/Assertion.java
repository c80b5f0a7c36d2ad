package dev.agentsidecar.toolserver;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A verified identity assertion (the JWT the sidecar sends as {@code x-agent-identity}): its
 * claims, once {@link #verify} checked steps 1 to 11 of the rule every verifier follows
 * (docs/tool-servers.md, "The rule every verifier follows"), in its order, each refusal's message
 * holding the rule's phrase. The JDK checks the signature (step 6) only; every other step is
 * written out here, so that no JWT library's defaults decide what passes. Immutable.
 */
final class Assertion {
  static final int MAX_BYTES = 6144;
  static final long MAX_TIME = 253402300799L; // 9999-12-31T23:59:59Z
  private static final List<String> REQUIRED = List.of("iss", "aud", "exp", "iat", "sid", "run_id");
  // Floats as BigDecimal, so that "whole" is decided on the number written, not on a double.
  private static final ObjectMapper JSON = JsonMapper.builder()
      .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
      .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
      .build();
  private static final Base64.Decoder BASE64URL = Base64.getUrlDecoder();

  /** {@code sub}; empty when absent (the anonymous principal). */
  final String subject;
  /** {@code sid}. */
  final String session;
  /** {@code run_id}. */
  final String run;
  /** {@code labels}; null when absent (too many to send). */
  final Map<String, String> labels;
  /** {@code exp}, seconds since the epoch. */
  final long expires;
  /** Every claim, as immutable Java values. */
  final Map<String, Object> claims;

  private Assertion(JsonNode payload, long expires) {
    this.subject = payload.has("sub") ? payload.get("sub").textValue() : "";
    this.session = payload.get("sid").textValue();
    this.run = payload.get("run_id").textValue();
    this.labels = payload.has("labels") ? Collections.unmodifiableMap(IdentityMetadata.stringObject(payload.get("labels"))) : null;
    this.expires = expires;
    @SuppressWarnings("unchecked")
    Map<String, Object> all = (Map<String, Object>) java(payload);
    this.claims = all;
  }

  /**
   * Verifies {@code token} with {@code keys} for this server ({@code audience}) and {@code
   * issuer}, at {@code now}, allowing {@code leeway} of clock difference.
   *
   * @throws IdentityRefused the first step of the rule that fails, saying why
   */
  static Assertion verify(String token, IdentityKeys keys, String issuer, String audience, Duration leeway, Instant now)
      throws IdentityRefused {
    // 1. size: before anything is decoded.
    int size = token.getBytes(StandardCharsets.UTF_8).length;
    if (size > MAX_BYTES) {
      throw new IdentityRefused("the identity assertion is over " + MAX_BYTES + " bytes (" + size + ")");
    }
    // 2. shape: three base64url parts; a header and a payload that are JSON objects.
    String[] parts = token.split("\\.", -1);
    if (parts.length != 3) {
      throw new IdentityRefused("the identity assertion is not a JWT: it has " + parts.length + " parts, not 3");
    }
    JsonNode header = object(parts[0], "header");
    JsonNode payload = object(parts[1], "payload");
    byte[] signature = base64url(parts[2], "signature");
    // 3. header: an algorithm the sidecar signs with, and no extension to understand.
    JsonNode alg = header.get("alg");
    if (alg == null || !(IdentityKeys.EDDSA.equals(alg.textValue()) || IdentityKeys.ES256.equals(alg.textValue()))) {
      throw new IdentityRefused("the identity assertion's header is refused: its alg "
          + (alg == null ? "is missing" : clip(alg.toString()) + " is not EdDSA or ES256"));
    }
    if (header.has("crit")) {
      throw new IdentityRefused("the identity assertion's header is refused: it has crit, and no extension is understood here");
    }
    if (header.has("b64")) {
      throw new IdentityRefused(
          "the identity assertion's header is refused: it has b64 (RFC 7797's unencoded payloads are not taken)");
    }
    // 4. key: the one kid names (a PEM key takes any).
    JsonNode kid = header.get("kid");
    IdentityKeys.Key key = keys.find(kid != null && kid.isTextual() ? kid.textValue() : null);
    if (key == null) {
      throw new IdentityRefused("the identity assertion is signed by a key this server does not know (kid "
          + (kid == null ? "none" : clip(kid.toString())) + "): give it the sidecar's current JWKS",
          kid != null && kid.isTextual() ? kid.textValue() : null);
    }
    // 5. header and key: the key's own algorithm only, whatever the header claims.
    if (!key.algorithm().equals(alg.textValue())) {
      throw new IdentityRefused("the identity assertion's header is refused: its alg is " + alg.textValue()
          + ", but the key it names signs " + key.algorithm());
    }
    // 6. signature.
    byte[] signed = (parts[0] + "." + parts[1]).getBytes(StandardCharsets.US_ASCII);
    if (!key.verifies(signed, signature)) {
      throw new IdentityRefused("the identity assertion's signature does not verify: it was changed on the way, "
          + "or signed with another key");
    }
    // 7. claims present (a JSON null is present: step 8 refuses it).
    for (String name : REQUIRED) {
      if (!payload.has(name)) {
        throw new IdentityRefused("the identity assertion lacks the claim \"" + name + "\"");
      }
    }
    // 8. claim types.
    long exp = time(payload, "exp");
    long iat = time(payload, "iat");
    Long nbf = payload.has("nbf") ? time(payload, "nbf") : null;
    for (String name : List.of("iss", "sub", "sid", "run_id")) {
      if (payload.has(name) && !payload.get(name).isTextual()) {
        throw badClaim(name, "is not a string");
      }
    }
    JsonNode aud = payload.get("aud");
    if (!aud.isTextual() && !(aud.isArray() && !aud.isEmpty() && allText(aud))) {
      throw badClaim("aud", "is neither a string nor a non-empty array of strings");
    }
    if (payload.has("labels") && IdentityMetadata.stringObject(payload.get("labels")) == null) {
      throw badClaim("labels", "is not an object of strings");
    }
    // 9. issuer.
    if (!payload.get("iss").textValue().equals(issuer)) {
      throw new IdentityRefused("the identity assertion's issuer is not " + quote(issuer));
    }
    // 10. audience.
    boolean forUs = aud.isTextual() ? aud.textValue().equals(audience) : contains(aud, audience);
    if (!forUs) {
      throw new IdentityRefused("the identity assertion is for another tool server; this one is " + quote(audience)
          + " (tool_servers[].name in the sidecar's configuration)");
    }
    // 11. lifetime.
    long slack = millis(leeway);
    long nowMillis = now.toEpochMilli();
    if (exp * 1000 + slack < nowMillis) {
      throw new IdentityRefused(expired(exp));
    }
    if (iat * 1000 - slack > nowMillis) {
      throw new IdentityRefused("the identity assertion is issued in the future: are the clocks of the sidecar "
          + "and this server apart by more than the leeway?");
    }
    if (nbf != null && nbf * 1000 - slack > nowMillis) {
      throw new IdentityRefused("the identity assertion is not valid before " + Instant.ofEpochSecond(nbf)
          + ": are the clocks of the sidecar and this server apart by more than the leeway?");
    }
    return new Assertion(payload, exp);
  }

  /** Whether it is still within its lifetime at {@code now}: a remembered assertion expires too. */
  void checkNotExpired(Duration leeway, Instant now) throws IdentityRefused {
    if (expires * 1000 + millis(leeway) < now.toEpochMilli()) {
      throw new IdentityRefused(expired(expires));
    }
  }

  /** The leeway in milliseconds, capped so that a time plus it cannot overflow. */
  private static long millis(Duration leeway) {
    return leeway.compareTo(Duration.ofMillis(Long.MAX_VALUE / 4)) > 0 ? Long.MAX_VALUE / 4 : leeway.toMillis();
  }

  static String expired(long exp) {
    return "the identity assertion expired at " + Instant.ofEpochSecond(exp);
  }

  private static JsonNode object(String part, String what) throws IdentityRefused {
    String text = IdentityMetadata.utf8(base64url(part, what));
    JsonNode node;
    try {
      node = text == null ? null : JSON.readTree(text);
    } catch (JsonProcessingException e) {
      node = null;
    }
    if (node == null || !node.isObject()) {
      throw new IdentityRefused("the identity assertion is not a JWT: its " + what + " is not a JSON object");
    }
    return node;
  }

  /** Unpadded base64url, as JWS writes it; anything else is no JWT. */
  private static byte[] base64url(String part, String what) throws IdentityRefused {
    for (int i = 0; i < part.length(); i++) {
      char c = part.charAt(i);
      if (!(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_')) {
        throw new IdentityRefused("the identity assertion is not a JWT: its " + what + " is not base64url");
      }
    }
    try {
      return BASE64URL.decode(part);
    } catch (IllegalArgumentException e) {
      throw new IdentityRefused("the identity assertion is not a JWT: its " + what + " is not base64url");
    }
  }

  /** A NumericDate claim: a JSON number with a whole value from 0 to {@link #MAX_TIME}. */
  private static long time(JsonNode payload, String name) throws IdentityRefused {
    JsonNode value = payload.get(name);
    if (value.isNumber()) {
      BigDecimal number = value.isIntegralNumber() ? new BigDecimal(value.bigIntegerValue()) : value.decimalValue();
      if (number.signum() >= 0 && number.compareTo(BigDecimal.valueOf(MAX_TIME)) <= 0
          && number.stripTrailingZeros().scale() <= 0) {
        return number.longValueExact();
      }
    }
    throw badClaim(name, "is not a whole number of seconds from 0 to " + MAX_TIME);
  }

  private static IdentityRefused badClaim(String name, String why) {
    return new IdentityRefused("the identity assertion's claim \"" + name + "\" " + why);
  }

  private static boolean allText(JsonNode array) {
    for (JsonNode item : array) {
      if (!item.isTextual()) {
        return false;
      }
    }
    return true;
  }

  private static boolean contains(JsonNode array, String text) {
    for (JsonNode item : array) {
      if (item.textValue().equals(text)) {
        return true;
      }
    }
    return false;
  }

  /** A value the caller sent, as JSON, cut short: it goes into a message and a log line. */
  private static String clip(String json) {
    return json.length() > 64 ? json.substring(0, 64) + "..." : json;
  }

  private static String quote(String text) {
    try {
      return JSON.writeValueAsString(text);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  /** A JSON value as immutable Java values: String, Long or BigInteger, Double, Boolean, null, List, Map. */
  private static Object java(JsonNode node) {
    if (node.isObject()) {
      Map<String, Object> out = new LinkedHashMap<>();
      node.properties().forEach(field -> out.put(field.getKey(), java(field.getValue())));
      return Collections.unmodifiableMap(out);
    }
    if (node.isArray()) {
      List<Object> out = new ArrayList<>();
      node.forEach(item -> out.add(java(item)));
      return Collections.unmodifiableList(out);
    }
    if (node.isIntegralNumber()) {
      return node.canConvertToLong() ? (Object) node.longValue() : node.bigIntegerValue();
    }
    if (node.isNumber()) {
      BigDecimal number = node.decimalValue();
      if (number.stripTrailingZeros().scale() <= 0 && number.abs().compareTo(BigDecimal.valueOf(Long.MAX_VALUE)) <= 0) {
        return number.longValueExact(); // 1800000000.0 is the whole number it writes
      }
      return node.doubleValue();
    }
    if (node.isTextual()) {
      return node.textValue();
    }
    if (node.isBoolean()) {
      return node.booleanValue();
    }
    return null;
  }
}
