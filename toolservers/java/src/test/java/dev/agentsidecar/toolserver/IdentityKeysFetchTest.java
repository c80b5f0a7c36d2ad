package dev.agentsidecar.toolserver;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.agentsidecar.v1.CallToolRequest;
import dev.agentsidecar.v1.GetIdentityKeysRequest;
import dev.agentsidecar.v1.GetIdentityKeysResponse;
import dev.agentsidecar.v1.IdentityKeysServiceGrpc;
import dev.agentsidecar.v1.ToolServiceGrpc;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCredentials;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsServerCredentials;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.MetadataUtils;
import io.grpc.stub.StreamObserver;
import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The identity keys fetched from a sidecar ({@code --identity-keys-from}): a real gRPC server on
 * 127.0.0.1 plays the sidecar's IdentityKeysService, a real tool server fetches from it, and calls
 * arrive over real gRPC as the sidecar makes them.
 */
class IdentityKeysFetchTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  // The rule's intervals, shortened: retries from 50 ms doubling to 200 ms, a kid-triggered
  // fetch at most every 300 ms.
  private static final IdentityKeysFetcher.Timing FAST = new IdentityKeysFetcher.Timing(
      Duration.ofMillis(50), Duration.ofMillis(200), Duration.ofMillis(300), Duration.ofSeconds(300), Duration.ofSeconds(5));

  static final AtomicInteger RUNS = new AtomicInteger();

  public static final class Whoami {
    @Tool(name = "whoami", description = "Answer who the call serves.")
    public String whoami(ToolContext context) {
      RUNS.incrementAndGet();
      CallerIdentity identity = context.identity();
      return identity.principal() + " " + identity.verified();
    }
  }

  /** The sidecar's IdentityKeysService, answering what the test sets. */
  static final class KeysServer extends IdentityKeysServiceGrpc.IdentityKeysServiceImplBase {
    volatile String jwks;
    volatile com.google.protobuf.Duration maxAge = com.google.protobuf.Duration.newBuilder().setSeconds(300).build();
    volatile Status failWith; // non-null: answer this status instead
    final AtomicInteger calls = new AtomicInteger();
    Server server;

    KeysServer(String jwks) {
      this.jwks = jwks;
    }

    KeysServer start() throws Exception {
      return start(new InetSocketAddress("127.0.0.1", 0), null);
    }

    KeysServer start(SocketAddress address, ServerCredentials credentials) throws Exception {
      NettyServerBuilder builder = credentials == null ? NettyServerBuilder.forAddress(address) : NettyServerBuilder.forAddress(address, credentials);
      server = builder.addService(this).build().start();
      return this;
    }

    String target() {
      return "127.0.0.1:" + server.getPort();
    }

    @Override
    public void getIdentityKeys(GetIdentityKeysRequest request, StreamObserver<GetIdentityKeysResponse> answer) {
      calls.incrementAndGet();
      Status fail = failWith;
      if (fail != null) {
        answer.onError(fail.asRuntimeException());
        return;
      }
      GetIdentityKeysResponse.Builder response = GetIdentityKeysResponse.newBuilder().setJwks(jwks);
      if (maxAge != null) {
        response.setMaxAge(maxAge);
      }
      answer.onNext(response.build());
      answer.onCompleted();
    }

    void stop() {
      if (server != null) {
        server.shutdownNow();
      }
    }
  }

  @TempDir
  Path dir;
  private KeysServer keys;
  private ToolServer.Running running;
  private ManagedChannel channel;

  @AfterEach
  void stopAll() {
    if (channel != null) {
      channel.shutdownNow();
    }
    if (running != null) {
      running.stop();
    }
    if (keys != null) {
      keys.stop();
    }
  }

  /** One JWKS of every signer's key. */
  static String jwks(TestSigner... signers) throws Exception {
    ObjectNode all = JSON.createObjectNode();
    ArrayNode list = all.putArray("keys");
    for (TestSigner signer : signers) {
      for (JsonNode key : JSON.readTree(signer.jwks()).get("keys")) {
        list.add(key);
      }
    }
    return JSON.writeValueAsString(all);
  }

  private void serve(ServeOptions options) {
    running = new ToolServer("orders").register(new Whoami()).keysTiming(FAST).start(options);
    channel = NettyChannelBuilder.forTarget(running.address()).usePlaintext().build();
  }

  private void serveFrom(String target) {
    serve(ServeOptions.defaults().withIdentityFrom(target, "orders", true));
  }

  /** The metadata the sidecar sends for alice's run r-1 with {@code token} as the assertion. */
  private static Metadata sidecar(String token) {
    Metadata metadata = new Metadata();
    metadata.put(Metadata.Key.of("x-agent-principal", Metadata.ASCII_STRING_MARSHALLER), "alice");
    metadata.put(Metadata.Key.of("x-agent-session-id", Metadata.ASCII_STRING_MARSHALLER), "s-1");
    metadata.put(Metadata.Key.of("x-agent-run-id", Metadata.ASCII_STRING_MARSHALLER), "r-1");
    metadata.put(Metadata.Key.of("x-agent-call-id", Metadata.ASCII_STRING_MARSHALLER), "c1");
    if (token != null) {
      metadata.put(Metadata.Key.of("x-agent-identity", Metadata.ASCII_STRING_MARSHALLER), token);
    }
    return metadata;
  }

  private static String call(ManagedChannel on, String token) {
    return ToolServiceGrpc.newBlockingStub(on).withInterceptors(MetadataUtils.newAttachHeadersInterceptor(sidecar(token)))
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .callTool(CallToolRequest.newBuilder().setCallId("c1").setToolName("whoami").build())
        .getResult().getOutput();
  }

  private String call(String token) {
    return call(channel, token);
  }

  /** The status a call with {@code token} is refused with; the tool never runs. */
  private Status refused(String token) {
    int runs = RUNS.get();
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> call(token));
    assertEquals(runs, RUNS.get(), "the tool ran");
    return e.getStatus();
  }

  /** Whether a call with {@code token} verifies within 10 s. */
  private boolean verifiesSoon(String token) throws InterruptedException {
    return eventually(() -> {
      try {
        return call(token).equals("alice true");
      } catch (StatusRuntimeException e) {
        return false;
      }
    });
  }

  private static boolean eventually(BooleanSupplier condition) throws InterruptedException {
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (System.nanoTime() < end) {
      if (condition.getAsBoolean()) {
        return true;
      }
      Thread.sleep(20);
    }
    return condition.getAsBoolean();
  }

  private static String fresh(TestSigner by) throws Exception {
    return by.sign(TestSigner.claims("orders", Instant.now().getEpochSecond()));
  }

  @Test
  void theServedKeysVerifyAnAssertion() throws Exception {
    TestSigner signer = TestSigner.ed25519("sidecar-key-1");
    keys = new KeysServer(jwks(signer)).start();
    serveFrom(keys.target());
    assertTrue(verifiesSoon(fresh(signer)));
    Status impostor = refused(fresh(TestSigner.ed25519("sidecar-key-1")));
    assertEquals(Status.Code.UNAUTHENTICATED, impostor.getCode());
    assertTrue(impostor.getDescription().contains("signature does not verify"), impostor.getDescription());
    assertEquals(1, keys.calls.get(), "fetched again within max_age");
  }

  @Test
  void untilTheFirstAnswerACallIsRefusedThenItVerifies() throws Exception {
    TestSigner signer = TestSigner.ed25519("sidecar-key-1");
    keys = new KeysServer(jwks(signer));
    keys.failWith = Status.UNAVAILABLE.withDescription("the sidecar is starting");
    keys.start();
    serveFrom(keys.target());
    String token = fresh(signer);
    Status status = refused(token);
    assertEquals(Status.Code.UNAUTHENTICATED, status.getCode());
    assertTrue(status.getDescription().contains("the identity keys are not fetched yet"), status.getDescription());
    assertTrue(status.getDescription().contains(keys.target()), status.getDescription());
    assertTrue(eventually(() -> keys.calls.get() >= 3), "a failed fetch is tried again"); // 50, 100 ms later
    assertTrue(refused(token).getDescription().contains("UNAVAILABLE: the sidecar is starting"));
    // A call without an assertion is judged as ever: refused for lacking one, not for the keys.
    Status none = refused(null);
    assertTrue(none.getDescription().contains("carries no identity assertion"), none.getDescription());
    keys.failWith = null;
    assertTrue(verifiesSoon(token));
  }

  @Test
  void aKeysServerThatStartsLateIsFetchedFromOnceItListens() throws Exception {
    int port;
    try (java.net.ServerSocket socket = new java.net.ServerSocket(0, 1, java.net.InetAddress.getByName("127.0.0.1"))) {
      port = socket.getLocalPort();
    }
    TestSigner signer = TestSigner.ed25519("sidecar-key-1");
    serveFrom("127.0.0.1:" + port);
    String token = fresh(signer);
    assertTrue(refused(token).getDescription().contains("the identity keys are not fetched yet from 127.0.0.1:" + port));
    // Down for longer than the channel's own reconnect backoff grows in that time (1 s, then
    // 1.6 s, ...): each try by the fetch's schedule (every 200 ms here) dials again.
    Thread.sleep(2700);
    keys = new KeysServer(jwks(signer)).start(new InetSocketAddress("127.0.0.1", port), null);
    // No bound on how soon: a loaded machine would make any such bound fail at random.
    assertTrue(verifiesSoon(token));
  }

  @Test
  void aRotationIsFetchedWhenAnAssertionNamesANewKid() throws Exception {
    TestSigner first = TestSigner.ed25519("sidecar-key-1");
    TestSigner second = TestSigner.ed25519("sidecar-key-2");
    keys = new KeysServer(jwks(first));
    keys.maxAge = com.google.protobuf.Duration.newBuilder().setSeconds(3600).build(); // no periodic refresh here
    keys.start();
    serveFrom(keys.target());
    String before = fresh(first);
    assertTrue(verifiesSoon(before));
    int fetched = keys.calls.get();
    // The sidecars publish the next key and start signing with it; this server has not asked yet.
    keys.jwks = jwks(second);
    String rotated = fresh(second);
    Status unknown = refused(rotated);
    assertTrue(unknown.getDescription().contains("a key this server does not know"), unknown.getDescription());
    assertTrue(verifiesSoon(rotated));
    assertTrue(keys.calls.get() > fetched);
    // New keys forget what was verified: the first key is gone, and so is its assertion.
    Status gone = refused(before);
    assertTrue(gone.getDescription().contains("a key this server does not know"), gone.getDescription());
    // Unknown kids in a burst fetch at most once per interval (300 ms here).
    Thread.sleep(400);
    int burstFrom = keys.calls.get();
    long start = System.nanoTime();
    for (int i = 0; i < 20; i++) {
      refused(fresh(TestSigner.ed25519("nobody-" + i)));
    }
    // The fetch they ask for runs in the background: wait for it, however slow the machine.
    assertTrue(eventually(() -> keys.calls.get() > burstFrom), "the unknown kids asked for no fetch");
    long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
    int burst = keys.calls.get() - burstFrom;
    assertTrue(burst <= 2 + tookMs / 300, burst + " fetches in " + tookMs + " ms");
  }

  @Test
  void aFailedRefreshKeepsTheKeys() throws Exception {
    TestSigner signer = TestSigner.ed25519("sidecar-key-1");
    keys = new KeysServer(jwks(signer));
    keys.maxAge = com.google.protobuf.Duration.newBuilder().setNanos(100_000_000).build(); // refreshed every 100 ms
    keys.start();
    serveFrom(keys.target());
    assertTrue(verifiesSoon(fresh(signer)));
    int fetched = keys.calls.get();
    keys.failWith = Status.UNAVAILABLE.withDescription("the sidecar restarts");
    assertTrue(eventually(() -> keys.calls.get() >= fetched + 3), "refreshed every max_age, then retried");
    assertEquals("alice true", call(fresh(signer)));
    keys.failWith = null;
    keys.jwks = "{\"keys\": []}"; // an answer without a usable key is a failure too
    int empty = keys.calls.get();
    assertTrue(eventually(() -> keys.calls.get() >= empty + 2));
    assertEquals("alice true", call(fresh(signer)));
  }

  @Test
  void withoutMaxAgeTheKeysAreFetchedAgainAfterTheDefault() throws Exception {
    TestSigner signer = TestSigner.ed25519("sidecar-key-1");
    keys = new KeysServer(jwks(signer));
    keys.maxAge = null;
    keys.start();
    running = new ToolServer("orders").register(new Whoami())
        .keysTiming(new IdentityKeysFetcher.Timing(Duration.ofMillis(50), Duration.ofMillis(200), Duration.ofMillis(300),
            Duration.ofMillis(100), Duration.ofSeconds(5)))
        .start(ServeOptions.defaults().withIdentityFrom(keys.target(), "orders", true));
    channel = NettyChannelBuilder.forTarget(running.address()).usePlaintext().build();
    assertTrue(verifiesSoon(fresh(signer)));
    assertTrue(eventually(() -> keys.calls.get() >= 3));
  }

  @Test
  void stoppingTheServerStopsTheFetching() throws Exception {
    TestSigner signer = TestSigner.ed25519("sidecar-key-1");
    keys = new KeysServer(jwks(signer));
    keys.failWith = Status.UNAVAILABLE;
    keys.start();
    serveFrom(keys.target());
    assertTrue(eventually(() -> keys.calls.get() >= 2));
    running.stop();
    running = null;
    String thread = "identity-keys-" + keys.target();
    assertTrue(eventually(() -> Thread.getAllStackTraces().keySet().stream().noneMatch(t -> t.getName().equals(thread))),
        "the fetching thread outlived the server");
    int calls = keys.calls.get();
    Thread.sleep(500); // retries were every 200 ms at most
    assertEquals(calls, keys.calls.get());
  }

  @Test
  void aCaFileMeansTlsVerifiedWithItsRoots() throws Exception {
    JsonNode certs = LifecycleTest.certificates();
    TestSigner signer = TestSigner.ed25519("sidecar-key-1");
    keys = new KeysServer(jwks(signer)).start(new InetSocketAddress("127.0.0.1", 0),
        TlsServerCredentials.create(new File(certs.get("cert").asText()), new File(certs.get("key").asText())));
    String target = "localhost:" + keys.server.getPort();
    serve(ServeOptions.defaults().withIdentityFrom(target, "orders", true).withIdentityKeysCa(certs.get("ca").asText()));
    assertTrue(verifiesSoon(fresh(signer)));
    running.stop();
    channel.shutdownNow();
    // Plaintext to the TLS port: never an answer.
    serveFrom(target);
    Thread.sleep(300);
    assertTrue(refused(fresh(signer)).getDescription().contains("the identity keys are not fetched yet"));
  }

  @Test
  @SuppressWarnings("deprecation") // EpollEventLoopGroup: still the way to serve a unix socket with grpc-netty-shaded
  void aUnixSocketTargetIsFetchedFromInPlaintext() throws Exception {
    assumeTrue(io.grpc.netty.shaded.io.netty.channel.epoll.Epoll.isAvailable(), "no epoll: no unix sockets here");
    Path socket = dir.resolve("sidecar.sock");
    TestSigner signer = TestSigner.ed25519("sidecar-key-1");
    io.grpc.netty.shaded.io.netty.channel.EventLoopGroup group = new io.grpc.netty.shaded.io.netty.channel.epoll.EpollEventLoopGroup(1);
    keys = new KeysServer(jwks(signer));
    keys.server = NettyServerBuilder.forAddress(new io.grpc.netty.shaded.io.netty.channel.unix.DomainSocketAddress(socket.toString()))
        .channelType(io.grpc.netty.shaded.io.netty.channel.epoll.EpollServerDomainSocketChannel.class)
        .bossEventLoopGroup(group).workerEventLoopGroup(group)
        .addService(keys).build().start();
    try {
      serveFrom("unix:" + socket);
      assertTrue(verifiesSoon(fresh(signer)));
    } finally {
      keys.stop();
      keys.server.awaitTermination(5, TimeUnit.SECONDS);
      group.shutdownGracefully(0, 0, TimeUnit.SECONDS);
    }
  }

  @Test
  void theFlagsAndOptions() throws Exception {
    ServeOptions parsed = ServeOptions.parse(new String[] {"--identity-keys-from", "127.0.0.1:7000", "--identity-keys-ca", "ca.pem",
        "--identity-audience", "orders", "--require-identity"}, Map.of());
    assertEquals("127.0.0.1:7000", parsed.identityKeysFrom());
    assertEquals("ca.pem", parsed.identityKeysCa());
    assertEquals(null, parsed.identityKeysFile());
    assertTrue(parsed.identityRequired());
    for (String[] bad : List.of(
        new String[] {"--identity-keys", "k.json", "--identity-keys-from", "127.0.0.1:7000", "--identity-audience", "orders"},
        new String[] {"--identity-keys-ca", "ca.pem"},
        new String[] {"--identity-keys-from", "127.0.0.1:7000"},
        new String[] {"--identity-keys-from", "sidecar", "--identity-audience", "orders"},
        new String[] {"--identity-keys-from", "unix:relative.sock", "--identity-audience", "orders"})) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ServeOptions.parse(bad, Map.of()));
      assertTrue(e.getMessage().contains("--identity-keys") && !e.getMessage().contains("identityKeys"), e.getMessage());
    }
    assertTrue(assertThrows(IllegalArgumentException.class, () -> ServeOptions.parse(new String[] {"--identity-keys", "k.json",
        "--identity-keys-from", "127.0.0.1:7000", "--identity-audience", "orders"}, Map.of())).getMessage().contains("exclude each other"));
    // The withers: one source of keys replaces the other.
    ServeOptions fromFile = ServeOptions.defaults().withIdentityFrom("localhost:7000", "orders", false).withIdentity("k.json", "orders", true);
    assertEquals(null, fromFile.identityKeysFrom());
    assertEquals("k.json", fromFile.identityKeysFile());
    ServeOptions fetched = fromFile.withIdentityFrom("localhost:7000", "orders", true).withIdentityKeysCa("ca.pem").withPort(7006);
    assertEquals(null, fetched.identityKeysFile());
    assertEquals("localhost:7000", fetched.identityKeysFrom());
    assertEquals("ca.pem", fetched.identityKeysCa());
  }

  @Test
  void plaintextOnlyToThisMachine() {
    for (String local : List.of("127.0.0.1:7000", "127.8.9.10:1", "localhost:7000", "LOCALHOST:7000", "[::1]:7000", "unix:/run/sidecar.sock",
        "unix:///run/sidecar.sock")) {
      assertTrue(IdentityKeysFetcher.isLocal(local), local);
    }
    for (String remote : List.of("10.0.0.7:7000", "sidecar.internal:7000", "127.0.0.1.nip.io:7000", "localhost.example.com:7000",
        "[2001:db8::1]:7000", "0.0.0.0:7000")) {
      assertFalse(IdentityKeysFetcher.isLocal(remote), remote);
    }
    for (String bad : List.of("sidecar", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", "dns:///sidecar:7000", "unix:", "http://sidecar:7000")) {
      assertThrows(IllegalArgumentException.class, () -> IdentityKeysFetcher.isLocal(bad), bad);
    }
  }

  @Test
  void aCaFileThatCannotBeReadFailsStart() throws Exception {
    ToolServer server = new ToolServer("orders").register(new Whoami());
    ToolServerException missing = assertThrows(ToolServerException.class, () ->
        server.start(ServeOptions.defaults().withIdentityFrom("127.0.0.1:7000", "orders", true).withIdentityKeysCa(dir.resolve("none.pem").toString())));
    assertTrue(missing.getMessage().contains("none.pem") && missing.getMessage().contains("no such file"), missing.getMessage());
    Path garbage = dir.resolve("garbage.pem");
    Files.writeString(garbage, "not a certificate");
    ToolServerException unusable = assertThrows(ToolServerException.class, () ->
        new ToolServer("orders").register(new Whoami())
            .start(ServeOptions.defaults().withIdentityFrom("127.0.0.1:7000", "orders", true).withIdentityKeysCa(garbage.toString())));
    assertTrue(unusable.getMessage().contains("garbage.pem"), unusable.getMessage());
  }

  @Test
  void aToolServerProcessFetchesItsKeysFromTheFlag() throws Exception {
    TestSigner signer = TestSigner.ed25519("sidecar-key-1");
    keys = new KeysServer(jwks(signer)).start();
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    Process server = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"), FixtureServer.class.getName(),
        "--identity-keys-from", keys.target(), "--identity-audience", "orders", "--require-identity")
        .redirectError(ProcessBuilder.Redirect.DISCARD).start();
    try {
      BufferedReader out = new BufferedReader(new InputStreamReader(server.getInputStream(), StandardCharsets.UTF_8));
      String listening = CompletableFuture.supplyAsync(() -> {
        try {
          return out.readLine();
        } catch (java.io.IOException e) {
          return null;
        }
      }).get(60, TimeUnit.SECONDS);
      assertTrue(listening != null && listening.startsWith("listening on 127.0.0.1:"), String.valueOf(listening));
      channel = NettyChannelBuilder.forTarget(listening.substring("listening on ".length())).usePlaintext().build();
      assertTrue(verifiesSoon(fresh(signer)), "the process never verified an assertion with the fetched keys");
      assertTrue(keys.calls.get() >= 1);
      StatusRuntimeException none = assertThrows(StatusRuntimeException.class, () ->
          ToolServiceGrpc.newBlockingStub(channel).withDeadlineAfter(10, TimeUnit.SECONDS)
              .callTool(CallToolRequest.newBuilder().setCallId("c1").setToolName("whoami").build()));
      assertEquals(Status.Code.UNAUTHENTICATED, none.getStatus().getCode());
      assertTrue(none.getStatus().getDescription().contains("carries no identity assertion"), none.getStatus().getDescription());
    } finally {
      server.destroyForcibly();
      server.waitFor(10, TimeUnit.SECONDS);
    }
  }
}
