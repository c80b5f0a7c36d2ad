package dev.agentsidecar.toolserver;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.agentsidecar.v1.CallToolRequest;
import dev.agentsidecar.v1.StreamToolRequest;
import dev.agentsidecar.v1.StreamToolResponse;
import dev.agentsidecar.v1.ToolServiceGrpc;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.MetadataUtils;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A real server that verifies identity assertions ({@code --identity-keys}, {@code
 * --require-identity}) called over real gRPC as the sidecar calls it: what fails to verify ends
 * UNAUTHENTICATED and the tool never runs; what verifies reaches the handler as a verified
 * identity.
 */
class IdentityServerTest {
  static volatile CallerIdentity lastIdentity;
  static final AtomicInteger RUNS = new AtomicInteger();

  public static final class Whoami {
    @Tool(name = "whoami", description = "Answer who the call serves.")
    public String whoami(ToolContext context) {
      RUNS.incrementAndGet();
      lastIdentity = context.identity();
      return lastIdentity.principal() + " " + lastIdentity.verified();
    }
  }

  @TempDir
  static Path dir;
  private static TestSigner signer;
  private static ToolServer.Running running;
  private static ManagedChannel channel;

  @BeforeAll
  static void start() throws Exception {
    signer = TestSigner.ed25519("sidecar-key-1");
    Path jwks = dir.resolve("jwks.json");
    Files.writeString(jwks, signer.jwks());
    running = new ToolServer("orders").register(new Whoami())
        .start(ServeOptions.parse(new String[] {"--identity-keys", jwks.toString(), "--identity-audience", "orders", "--require-identity"}, Map.of()));
    channel = NettyChannelBuilder.forTarget(running.address()).usePlaintext().build();
  }

  @AfterAll
  static void stop() {
    channel.shutdownNow();
    running.stop();
  }

  /** The metadata the sidecar sends for alice's run r-1, with {@code token} as the assertion (null: none). */
  private static Metadata sidecar(String token, String callId) {
    Metadata metadata = new Metadata();
    metadata.put(Metadata.Key.of("x-agent-principal", Metadata.ASCII_STRING_MARSHALLER), "alice");
    metadata.put(Metadata.Key.of("x-agent-session-id", Metadata.ASCII_STRING_MARSHALLER), "s-1");
    metadata.put(Metadata.Key.of("x-agent-run-id", Metadata.ASCII_STRING_MARSHALLER), "r-1");
    metadata.put(Metadata.Key.of("x-agent-call-id", Metadata.ASCII_STRING_MARSHALLER), callId);
    metadata.put(Metadata.Key.of("x-agent-labels-bin", Metadata.BINARY_BYTE_MARSHALLER), "{\"tenant\":\"acme\"}".getBytes(StandardCharsets.UTF_8));
    if (token != null) {
      metadata.put(Metadata.Key.of("x-agent-identity", Metadata.ASCII_STRING_MARSHALLER), token);
    }
    return metadata;
  }

  private static String call(ManagedChannel on, Metadata metadata, String callId) {
    return ToolServiceGrpc.newBlockingStub(on).withInterceptors(MetadataUtils.newAttachHeadersInterceptor(metadata))
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .callTool(CallToolRequest.newBuilder().setCallId(callId).setToolName("whoami").build())
        .getResult().getOutput();
  }

  private static Status refused(Metadata metadata, String callId) {
    int runs = RUNS.get();
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> call(channel, metadata, callId));
    assertEquals(runs, RUNS.get(), "the tool ran");
    return e.getStatus();
  }

  private static String fresh(TestSigner by) throws Exception {
    return by.sign(TestSigner.claims("orders", Instant.now().getEpochSecond()));
  }

  @Test
  void aCallWithoutAnAssertionIsUnauthenticatedAndTheToolNeverRuns() {
    Status status = refused(sidecar(null, "c1"), "c1");
    assertEquals(Status.Code.UNAUTHENTICATED, status.getCode());
    assertTrue(status.getDescription().contains("carries no identity assertion"), status.getDescription());
  }

  @Test
  void aBadAssertionIsUnauthenticatedSayingWhyWithoutTheToken() throws Exception {
    String impostor = fresh(TestSigner.ed25519("sidecar-key-1")); // the same kid, another key
    Status status = refused(sidecar(impostor, "c1"), "c1");
    assertEquals(Status.Code.UNAUTHENTICATED, status.getCode());
    assertTrue(status.getDescription().contains("signature does not verify"), status.getDescription());
    assertFalse(status.getDescription().contains(impostor));
    Status forBilling = refused(sidecar(signer.sign(TestSigner.claims("billing", Instant.now().getEpochSecond())), "c1"), "c1");
    assertTrue(forBilling.getDescription().contains("for another tool server"), forBilling.getDescription());
    Status otherCall = refused(sidecar(fresh(signer), "c1"), "c2"); // the entry names another call than the request
    assertTrue(otherCall.getDescription().contains("x-agent-call-id contradicts the request's call_id"), otherCall.getDescription());
  }

  @Test
  void aValidAssertionReachesTheHandlerAsAVerifiedIdentity() throws Exception {
    String token = fresh(signer);
    assertEquals("alice true", call(channel, sidecar(token, "c1"), "c1"));
    CallerIdentity identity = lastIdentity;
    assertTrue(identity.verified());
    assertEquals("alice", identity.principal());
    assertEquals("s-1", identity.sessionId());
    assertEquals("r-1", identity.runId());
    assertEquals("c1", identity.callId());
    assertEquals(Map.of("tenant", "acme"), identity.labels());
    assertEquals("orders", identity.claims().get("aud"));
    assertEquals("alice true", call(channel, sidecar(token, "c2"), "c2")); // the run's next call: remembered
    assertEquals("c2", lastIdentity.callId());
  }

  @Test
  void streamToolVerifiesToo() throws Exception {
    ToolServiceGrpc.ToolServiceBlockingStub stub = ToolServiceGrpc.newBlockingStub(channel).withDeadlineAfter(10, TimeUnit.SECONDS);
    StreamToolRequest request = StreamToolRequest.newBuilder()
        .setCall(CallToolRequest.newBuilder().setCallId("c1").setToolName("whoami")).build();
    List<StreamToolResponse> messages = new ArrayList<>();
    stub.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(sidecar(fresh(signer), "c1"))).streamTool(request).forEachRemaining(messages::add);
    assertEquals("alice true", messages.get(messages.size() - 1).getResult().getOutput());
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () ->
        stub.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(sidecar(null, "c1"))).streamTool(request).forEachRemaining(m -> {}));
    assertEquals(Status.Code.UNAUTHENTICATED, e.getStatus().getCode());
  }

  @Test
  void withoutVerificationTheHandlerSeesThePlainIdentity() {
    ToolServer.Running plain = new ToolServer("plain").register(new Whoami()).start(ServeOptions.defaults());
    ManagedChannel to = NettyChannelBuilder.forTarget(plain.address()).usePlaintext().build();
    try {
      Metadata metadata = sidecar("not even a JWT", "c9");
      metadata.put(Metadata.Key.of("x-agent-session-id", Metadata.ASCII_STRING_MARSHALLER), "s%202"); // twice: malformed
      dev.agentsidecar.v1.ToolResult failed = ToolServiceGrpc.newBlockingStub(to).withInterceptors(MetadataUtils.newAttachHeadersInterceptor(metadata))
          .withDeadlineAfter(10, TimeUnit.SECONDS).callTool(CallToolRequest.newBuilder().setCallId("c9").setToolName("whoami").build()).getResult();
      assertEquals("the call's identity metadata is malformed: the metadata holds x-agent-session-id more than once", failed.getError().getMessage());
      assertEquals("alice false", call(to, sidecar("not even a JWT", "c9"), "c9"));
      assertFalse(lastIdentity.verified());
      assertEquals("c9", lastIdentity.callId());
      assertEquals(Map.of("tenant", "acme"), lastIdentity.labels());
    } finally {
      to.shutdownNow();
      plain.stop();
    }
  }
}
