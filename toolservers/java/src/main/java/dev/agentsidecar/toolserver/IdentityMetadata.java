package dev.agentsidecar.toolserver;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import io.grpc.Metadata;
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The metadata the sidecar sends with every tool call naming who it serves (docs/tool-servers.md,
 * "Who the call serves"; {@code agentsidecar.tool_identity} in Python is the contract). Text
 * values are percent-encoded UTF-8, so that any principal or id travels as printable ASCII; the
 * labels are a JSON object in a binary entry, so that they may hold any text.
 */
final class IdentityMetadata {
  static final String PRINCIPAL = "x-agent-principal";
  static final String SESSION_ID = "x-agent-session-id";
  static final String RUN_ID = "x-agent-run-id";
  static final String CALL_ID = "x-agent-call-id";
  static final String LABELS = "x-agent-labels-bin";
  static final String ASSERTION = "x-agent-identity";
  /** The text keys, in the order their contradictions are reported. */
  static final List<String> TEXT_KEYS = List.of(PRINCIPAL, SESSION_ID, RUN_ID, CALL_ID);

  private static final Metadata.Key<byte[]> LABELS_KEY = Metadata.Key.of(LABELS, Metadata.BINARY_BYTE_MARSHALLER);
  private static final ObjectMapper JSON = JsonMapper.builder().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS).build();

  private IdentityMetadata() {}

  /** The identity metadata is not what a sidecar sends: a key twice, labels that are no JSON. */
  static final class Malformed extends Exception {
    private static final long serialVersionUID = 1L;

    Malformed(String message) {
      super(message, null, false, false);
    }
  }

  /**
   * The contract's entries of a call's metadata: the text keys' raw values (still encoded) and
   * the labels' bytes, by key; absent keys are left out.
   *
   * @throws Malformed a key occurs more than once: the sidecar sends each once, so a second one
   *     was added on the way, and which of them to believe cannot be told
   */
  static Map<String, Object> entries(Metadata metadata) throws Malformed {
    Map<String, Object> found = new LinkedHashMap<>();
    for (String key : List.of(PRINCIPAL, SESSION_ID, RUN_ID, CALL_ID, ASSERTION)) {
      String value = only(key, metadata.getAll(Metadata.Key.of(key, Metadata.ASCII_STRING_MARSHALLER)));
      if (value != null) {
        found.put(key, value);
      }
    }
    byte[] labels = only(LABELS, metadata.getAll(LABELS_KEY));
    if (labels != null) {
      found.put(LABELS, labels);
    }
    return found;
  }

  private static <T> T only(String key, Iterable<T> values) throws Malformed {
    if (values == null) {
      return null;
    }
    Iterator<T> each = values.iterator();
    if (!each.hasNext()) {
      return null;
    }
    T value = each.next();
    if (each.hasNext()) {
      throw new Malformed("the metadata holds " + key + " more than once");
    }
    return value;
  }

  /**
   * The identity a call's metadata states, unverified: the call id is the metadata's when it
   * has one, else {@code callId} (the request's).
   */
  static CallerIdentity plain(Metadata metadata, String callId) throws Malformed {
    Map<String, Object> found = entries(metadata);
    Map<String, String> labels = found.containsKey(LABELS) ? labels((byte[]) found.get(LABELS)) : Map.of();
    return new CallerIdentity(
        text(found, PRINCIPAL),
        text(found, SESSION_ID),
        text(found, RUN_ID),
        found.containsKey(CALL_ID) ? text(found, CALL_ID) : callId,
        labels == null ? Map.of() : labels,
        labels == null,
        false,
        Map.of());
  }

  /** The decoded text of {@code key}; empty when absent. */
  static String text(Map<String, Object> found, String key) {
    Object value = found.get(key);
    return value == null ? "" : decodeText((String) value);
  }

  /**
   * Percent-decodes UTF-8 as Python's {@code urllib.parse.unquote} does: a {@code %} not followed
   * by two hex digits stays as it is, and bytes that are no UTF-8 become U+FFFD.
   */
  static String decodeText(String value) {
    if (value.indexOf('%') < 0) {
      return value;
    }
    ByteArrayOutputStream bytes = new ByteArrayOutputStream(value.length());
    for (int i = 0; i < value.length(); ) {
      int c = value.codePointAt(i);
      int high = c == '%' && i + 2 < value.length() ? hex(value.charAt(i + 1)) : -1;
      int low = high >= 0 ? hex(value.charAt(i + 2)) : -1;
      if (low >= 0) {
        bytes.write(high << 4 | low);
        i += 3;
      } else {
        byte[] encoded = Character.toString(c).getBytes(StandardCharsets.UTF_8);
        bytes.write(encoded, 0, encoded.length);
        i += Character.charCount(c);
      }
    }
    return bytes.toString(StandardCharsets.UTF_8);
  }

  private static int hex(char c) {
    return c < 128 ? Character.digit(c, 16) : -1; // ASCII digits only, as RFC 3986 says
  }

  /**
   * The labels of the labels entry: null for {@code null} (the session has labels too large to
   * send).
   *
   * @throws Malformed it is neither a JSON object of strings nor {@code null}
   */
  static Map<String, String> labels(byte[] value) throws Malformed {
    String text = utf8(value);
    JsonNode decoded;
    try {
      decoded = text == null ? null : JSON.readTree(text);
    } catch (JsonProcessingException e) {
      decoded = null;
    }
    if (decoded == null || decoded.isMissingNode()) {
      throw new Malformed("the labels entry is not JSON");
    }
    if (decoded.isNull()) {
      return null;
    }
    Map<String, String> labels = stringObject(decoded);
    if (labels == null) {
      throw new Malformed("the labels entry is not a JSON object of strings");
    }
    return labels;
  }

  /** The text of UTF-8 bytes; null when they are no UTF-8 (JSON is UTF-8, RFC 8259). */
  static String utf8(byte[] bytes) {
    try {
      return StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(bytes))
          .toString();
    } catch (CharacterCodingException e) {
      return null;
    }
  }

  /** The entries of a JSON object whose values are all strings; null when it is not one. */
  static Map<String, String> stringObject(JsonNode node) {
    if (!node.isObject()) {
      return null;
    }
    Map<String, String> out = new LinkedHashMap<>();
    for (Map.Entry<String, JsonNode> field : node.properties()) {
      if (!field.getValue().isTextual()) {
        return null;
      }
      out.put(field.getKey(), field.getValue().textValue());
    }
    return out;
  }
}
