package dev.agentsidecar.toolserver;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.grpc.Metadata;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.io.TempDir;

/**
 * The rule every verifier follows (docs/tool-servers.md): every case of
 * tests/security/identity-vectors.json, which the Python, Go and TypeScript SDKs run too, through
 * this library's verifier at the file's clock, identity required. Each case runs twice on one
 * verifier, so that an assertion remembered as verified reaches the same outcome.
 */
class IdentityVectorsTest {
  private static final Path ROOT = Path.of(System.getProperty("agentsidecar.repoRoot", "../..")).toAbsolutePath().normalize();
  private static final ObjectMapper JSON = new ObjectMapper();

  @TempDir
  static Path dir;

  @TestFactory
  List<DynamicTest> everyCaseOfTheRule() throws Exception {
    JsonNode vectors = JSON.readTree(ROOT.resolve("tests/security/identity-vectors.json").toFile());
    assertTrue(vectors.get("cases").size() >= 60, "the file holds every case of the rule");
    Path jwks = dir.resolve("jwks.json");
    Files.writeString(jwks, vectors.get("jwks").toString());
    Clock clock = Clock.fixed(Instant.ofEpochSecond(vectors.get("now").longValue()), ZoneOffset.UTC);
    IdentityVerifier verifier = new IdentityVerifier(jwks, vectors.get("audience").textValue(), vectors.get("issuer").textValue(),
        true, Duration.ofMillis(Math.round(vectors.get("leeway").doubleValue() * 1000)), clock, JSON);
    String callId = vectors.get("call_id").textValue();
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode vector : vectors.get("cases")) {
      tests.add(DynamicTest.dynamicTest(vector.get("name").textValue(), () -> {
        for (int round = 1; round <= 2; round++) {
          Metadata metadata = metadata(vector);
          if (vector.has("refused")) {
            String phrase = vectors.get("reasons").get(vector.get("refused").textValue()).textValue();
            IdentityRefused refused = assertThrows(IdentityRefused.class, () -> verifier.verify(metadata, callId), "round " + round);
            assertTrue(refused.getMessage().contains(phrase), "round " + round + ": \"" + refused.getMessage() + "\" lacks \"" + phrase + "\"");
            if (vector.get("token").isTextual()) {
              assertTrue(!refused.getMessage().contains(vector.get("token").textValue()), "the message holds the token");
            }
          } else {
            CallerIdentity identity = verifier.verify(metadata, callId);
            JsonNode expected = vector.get("verified");
            assertEquals(expected.get("principal").textValue(), identity.principal());
            assertEquals(expected.get("session_id").textValue(), identity.sessionId());
            assertEquals(expected.get("run_id").textValue(), identity.runId());
            assertEquals(expected.get("call_id").textValue(), identity.callId());
            assertEquals(labels(expected.get("labels")), identity.labels());
            assertEquals(expected.get("labels_omitted").booleanValue(), identity.labelsOmitted());
            assertTrue(identity.verified());
            assertEquals(identity.sessionId(), identity.claims().get("sid"));
            assertTrue(identity.claims().get("exp") instanceof Long, "exp is a whole number (1800000295.0 too)");
          }
        }
      }));
    }
    return tests;
  }

  /** A case's metadata: entries ending -bin are bytes (their UTF-8), the others text. */
  static Metadata metadata(JsonNode vector) {
    Metadata metadata = new Metadata();
    for (JsonNode entry : vector.get("metadata")) {
      String key = entry.get(0).textValue();
      String value = entry.get(1).textValue();
      if (key.endsWith(Metadata.BINARY_HEADER_SUFFIX)) {
        metadata.put(Metadata.Key.of(key, Metadata.BINARY_BYTE_MARSHALLER), value.getBytes(StandardCharsets.UTF_8));
      } else {
        metadata.put(Metadata.Key.of(key, Metadata.ASCII_STRING_MARSHALLER), value);
      }
    }
    if (vector.get("token").isTextual()) {
      metadata.put(Metadata.Key.of(IdentityMetadata.ASSERTION, Metadata.ASCII_STRING_MARSHALLER), vector.get("token").textValue());
    }
    return metadata;
  }

  static Map<String, String> labels(JsonNode node) {
    Map<String, String> out = new LinkedHashMap<>();
    node.properties().forEach(field -> out.put(field.getKey(), field.getValue().textValue()));
    return out;
  }
}
