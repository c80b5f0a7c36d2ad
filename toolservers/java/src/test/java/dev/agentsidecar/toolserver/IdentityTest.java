package dev.agentsidecar.toolserver;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.grpc.Metadata;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Who a call serves: the plain metadata's decoding, the keys files, the remembered assertions, the flags. */
class IdentityTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final long NOW = 1_800_000_000L;

  @TempDir
  Path dir;

  /** A clock a test moves. */
  static final class MovingClock extends Clock {
    volatile Instant now;

    MovingClock(Instant now) {
      this.now = now;
    }

    @Override
    public ZoneId getZone() {
      return ZoneOffset.UTC;
    }

    @Override
    public Clock withZone(ZoneId zone) {
      return this;
    }

    @Override
    public Instant instant() {
      return now;
    }
  }

  static Metadata metadata(String... textEntries) {
    Metadata metadata = new Metadata();
    for (int i = 0; i < textEntries.length; i += 2) {
      metadata.put(Metadata.Key.of(textEntries[i], Metadata.ASCII_STRING_MARSHALLER), textEntries[i + 1]);
    }
    return metadata;
  }

  static Metadata withLabels(Metadata metadata, String json) {
    metadata.put(Metadata.Key.of("x-agent-labels-bin", Metadata.BINARY_BYTE_MARSHALLER), json.getBytes(StandardCharsets.UTF_8));
    return metadata;
  }

  private IdentityVerifier verifier(Path keys, boolean required, Clock clock) {
    return new IdentityVerifier(keys, "orders", "agent-sidecar", required, Duration.ofSeconds(10), clock, JSON);
  }

  /** A context as a unit test of a tool makes one: its identity() is the interface's default. */
  private static ToolContext context(Metadata metadata, String callId) {
    return new ToolContext() {
      public String callId() { return callId; }
      public String toolName() { return "t"; }
      public Metadata metadata() { return metadata; }
      public Optional<Duration> timeRemaining() { return Optional.empty(); }
      public boolean isCancelled() { return false; }
      public void reportProgress(double progress, double total, String message) {}
    };
  }

  @Test
  void thePlainIdentityDecodesPercentEncodedUtf8AndTheLabels() {
    Metadata metadata = withLabels(metadata(
        "x-agent-principal", "J%C3%BCrgen%20M%2Fx",
        "x-agent-session-id", "100%",
        "x-agent-run-id", "r%FF%zz",
        "x-agent-call-id", "c%2D7"), "{\"tenant\":\"\u00c4cht\",\"team\":\"a b\"}");
    CallerIdentity identity = context(metadata, "request-id").identity();
    assertEquals("J\u00fcrgen M/x", identity.principal());
    assertEquals("100%", identity.sessionId()); // a % without two hex digits stays, as unquote keeps it
    assertEquals("r\ufffd%zz", identity.runId()); // bytes that are no UTF-8 become U+FFFD
    assertEquals("c-7", identity.callId()); // the metadata's call id, when it has one
    assertEquals(Map.of("tenant", "\u00c4cht", "team", "a b"), identity.labels());
    assertFalse(identity.labelsOmitted() || identity.verified());
    assertTrue(identity.claims().isEmpty());
    assertThrows(UnsupportedOperationException.class, () -> identity.labels().put("x", "y"));
  }

  @Test
  void labelsOfNullAreOmittedAndNoEntryIsNoLabels() {
    CallerIdentity omitted = context(withLabels(metadata(), "null"), "c1").identity();
    assertTrue(omitted.labelsOmitted());
    assertEquals(Map.of(), omitted.labels());
    CallerIdentity none = context(metadata(), "c1").identity();
    assertFalse(none.labelsOmitted());
    assertEquals(Map.of(), none.labels());
    assertEquals("c1", none.callId()); // no call id entry: the request's
    assertEquals("", none.principal());
  }

  @Test
  void aRepeatedKeyOrLabelsThatAreNoJsonObjectOfStringsAreMalformed() throws Exception {
    Metadata twice = metadata("x-agent-principal", "alice", "x-agent-principal", "mallory");
    ToolFailure failure = assertThrows(ToolFailure.class, () -> context(twice, "c1").identity());
    assertTrue(failure.getMessage().contains("malformed: the metadata holds x-agent-principal more than once"), failure.getMessage());
    for (String labels : new String[] {"{\"tenant\": 1}", "[\"a\"]", "{broken", "{} {}"}) {
      assertThrows(ToolFailure.class, () -> context(withLabels(metadata(), labels), "c1").identity(), labels);
    }
    Path keys = dir.resolve("jwks.json");
    Files.writeString(keys, TestSigner.ed25519("k1").jwks());
    IdentityRefused refused = assertThrows(IdentityRefused.class, () -> verifier(keys, false, Clock.systemUTC()).verify(twice, "c1"));
    assertTrue(refused.getMessage().contains("identity metadata is malformed"), refused.getMessage());
    Metadata twoAssertions = metadata("x-agent-identity", "a.b.c", "x-agent-identity", "d.e.f");
    refused = assertThrows(IdentityRefused.class, () -> verifier(keys, true, Clock.systemUTC()).verify(twoAssertions, "c1"));
    assertTrue(refused.getMessage().contains("x-agent-identity more than once"), refused.getMessage());
  }

  @Test
  void withoutAnAssertionAVerifierThatRequiresNoneGivesThePlainIdentity() throws Exception {
    Path keys = dir.resolve("jwks.json");
    Files.writeString(keys, TestSigner.ed25519("k1").jwks());
    CallerIdentity identity = verifier(keys, false, Clock.systemUTC()).verify(metadata("x-agent-principal", "bob"), "c1");
    assertEquals("bob", identity.principal());
    assertFalse(identity.verified());
  }

  @Test
  void aPemKeyTakesAnyKidAndEs256SignaturesVerify() throws Exception {
    for (TestSigner signer : new TestSigner[] {TestSigner.es256("whatever"), TestSigner.ed25519("anything")}) {
      Path pem = dir.resolve(signer.algorithm + ".pem");
      Files.writeString(pem, signer.pem());
      Metadata metadata = metadata("x-agent-identity", signer.sign(TestSigner.claims("orders", NOW)), "x-agent-principal", "alice");
      CallerIdentity identity = verifier(pem, true, Clock.fixed(Instant.ofEpochSecond(NOW), ZoneOffset.UTC)).verify(metadata, "c1");
      assertTrue(identity.verified(), signer.algorithm);
      assertEquals("alice", identity.principal());
      assertEquals("acme", identity.labels().get("tenant"));
      assertEquals("alice", identity.claims().get("sub"));
    }
  }

  @Test
  void aRememberedAssertionStillExpires() throws Exception {
    TestSigner signer = TestSigner.ed25519("k1");
    Path keys = dir.resolve("jwks.json");
    Files.writeString(keys, signer.jwks());
    MovingClock clock = new MovingClock(Instant.ofEpochSecond(NOW));
    IdentityVerifier verifier = verifier(keys, true, clock);
    Metadata metadata = metadata("x-agent-identity", signer.sign(TestSigner.claims("orders", NOW)));
    assertTrue(verifier.verify(metadata, "c1").verified());
    clock.now = Instant.ofEpochSecond(NOW + 309);
    assertTrue(verifier.verify(metadata, "c2").verified()); // within the leeway
    clock.now = Instant.ofEpochSecond(NOW + 311);
    IdentityRefused refused = assertThrows(IdentityRefused.class, () -> verifier.verify(metadata, "c3"));
    assertEquals("the identity assertion expired at 2027-01-15T08:05:00Z", refused.getMessage());
  }

  @Test
  void theKeysFileIsRereadWithinASecondOfAChangeAndAnUnusableOneKeepsTheKeys() throws Exception {
    TestSigner first = TestSigner.ed25519("k1");
    TestSigner second = TestSigner.ed25519("k2");
    Path keys = dir.resolve("jwks.json");
    Files.writeString(keys, first.jwks());
    IdentityVerifier verifier = verifier(keys, true, Clock.systemUTC());
    long now = Instant.now().getEpochSecond();
    Metadata byFirst = metadata("x-agent-identity", first.sign(TestSigner.claims("orders", now)));
    Metadata bySecond = metadata("x-agent-identity", second.sign(TestSigner.claims("orders", now)));
    assertTrue(verifier.verify(byFirst, "c1").verified());
    Files.writeString(keys, second.jwks());
    Thread.sleep(1100);
    assertTrue(verifier.verify(bySecond, "c2").verified());
    IdentityRefused refused = assertThrows(IdentityRefused.class, () -> verifier.verify(byFirst, "c3"));
    assertTrue(refused.getMessage().contains("does not know (kid \"k1\")"), refused.getMessage()); // forgotten, too
    Files.writeString(keys, "{\"keys\": [");
    Thread.sleep(1100);
    assertTrue(verifier.verify(bySecond, "c4").verified());
  }

  @Test
  void aKeysFileWithoutAUsableKeyIsRefusedSayingWhy() throws Exception {
    Path rsa = dir.resolve("rsa.json");
    Files.writeString(rsa, "{\"keys\": [{\"kty\": \"RSA\", \"kid\": \"r\", \"n\": \"AQAB\", \"e\": \"AQAB\"}, {\"kty\": \"OKP\", \"crv\": \"Ed25519\", \"x\": \"AAAA\"}]}");
    Path text = dir.resolve("text.txt");
    Files.writeString(text, "hello");
    Path rsaPem = dir.resolve("rsa.pem");
    java.security.KeyPairGenerator generator = java.security.KeyPairGenerator.getInstance("RSA");
    generator.initialize(2048);
    Files.writeString(rsaPem, "-----BEGIN PUBLIC KEY-----\n" + java.util.Base64.getMimeEncoder().encodeToString(
        generator.generateKeyPair().getPublic().getEncoded()) + "\n-----END PUBLIC KEY-----\n");
    for (Object[] c : new Object[][] {
        {rsa, "holds no usable key"}, {rsaPem, "holds no usable key"},
        {text, "is neither a JWKS"}, {dir.resolve("absent.json"), "cannot read the identity keys"}}) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> verifier((Path) c[0], true, Clock.systemUTC()));
      assertTrue(e.getMessage().contains((String) c[1]), e.getMessage());
    }
    ToolServerException e = assertThrows(ToolServerException.class, () -> new ToolServer("s").register(new Fixtures())
        .start(ServeOptions.defaults().withIdentity(dir.resolve("absent.json").toString(), "orders", true)));
    assertTrue(e.getMessage().contains("cannot read the identity keys"), e.getMessage());
  }

  @Test
  void theIdentityFlagsMirrorThePythonSdks() {
    ServeOptions options = ServeOptions.parse(new String[] {
        "--identity-keys", "jwks.json", "--identity-audience", "orders", "--require-identity", "--identity-leeway", "2.5", "--port", "7"},
        Map.of());
    assertEquals("jwks.json", options.identityKeysFile());
    assertEquals("orders", options.identityAudience());
    assertEquals("agent-sidecar", options.identityIssuer());
    assertTrue(options.identityRequired());
    assertEquals(Duration.ofMillis(2500), options.identityLeeway());
    assertEquals(7, options.port());
    assertEquals("me", ServeOptions.parse(new String[] {"--identity-keys", "k", "--identity-audience", "a", "--identity-issuer", "me"},
        Map.of()).identityIssuer());
    assertEquals(Duration.ofSeconds(10), ServeOptions.defaults().identityLeeway());
    assertEquals(options, options.withPort(7)); // the with-methods keep the identity options
    for (String[] c : new String[][] {
        {"--identity-keys needs --identity-audience", "--identity-keys", "k"},
        {"--require-identity needs --identity-keys", "--require-identity"},
        {"--identity-leeway is negative", "--identity-keys", "k", "--identity-audience", "a", "--identity-leeway", "-1"}}) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
          () -> ServeOptions.parse(java.util.Arrays.copyOfRange(c, 1, c.length), Map.of()));
      assertTrue(e.getMessage().contains(c[0]), e.getMessage());
    }
  }
}
