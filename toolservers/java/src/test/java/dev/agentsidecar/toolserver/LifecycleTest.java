package dev.agentsidecar.toolserver;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.agentsidecar.v1.CallToolRequest;
import dev.agentsidecar.v1.StreamToolRequest;
import dev.agentsidecar.v1.StreamToolResponse;
import dev.agentsidecar.v1.ToolServiceGrpc;
import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** TLS, reflection, and the drain of a server process on SIGTERM. */
class LifecycleTest {
  private static final Path ROOT = Path.of(System.getProperty("agentsidecar.repoRoot", "../..")).toAbsolutePath().normalize();

  private static String python() {
    String python = System.getenv("AGENT_SIDECAR_PYTHON");
    return python == null || python.isEmpty() ? ROOT.resolve(".venv/bin/python").toString() : python;
  }

  /** A CA, a server and a client certificate, made by the repository's Python test helpers. */
  static JsonNode certificates() throws Exception {
    Path dir = Files.createTempDirectory("toolserver-tls");
    String script = String.join("\n",
        "import json, sys, pathlib",
        "from sidecar.testing.certs import TestCA",
        "ca = TestCA(pathlib.Path(sys.argv[1]))",
        "s = ca.issue('server')",
        "c = ca.issue('client', client=True)",
        "print(json.dumps({'ca': ca.ca_file, 'cert': s.cert_file, 'key': s.key_file, 'client_cert': c.cert_file, 'client_key': c.key_file}))");
    Process process = new ProcessBuilder(python(), "-c", script, dir.toString()).directory(ROOT.toFile()).start();
    String out = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertEquals(0, process.waitFor(), new String(process.getErrorStream().readAllBytes(), StandardCharsets.UTF_8));
    return new ObjectMapper().readTree(out);
  }

  @Test
  void mutualTlsServesCallersWithACertificateAndRefusesOthers() throws Exception {
    JsonNode certs = certificates();
    ToolServer.Running running = new ToolServer("tls").register(new Fixtures())
        .start(ServeOptions.defaults().withTls(certs.get("cert").asText(), certs.get("key").asText(), certs.get("ca").asText()));
    ChannelCredentials withCert = TlsChannelCredentials.newBuilder()
        .trustManager(new File(certs.get("ca").asText()))
        .keyManager(new File(certs.get("client_cert").asText()), new File(certs.get("client_key").asText()))
        .build();
    ChannelCredentials withoutCert = TlsChannelCredentials.newBuilder().trustManager(new File(certs.get("ca").asText())).build();
    ManagedChannel good = Grpc.newChannelBuilder("localhost:" + running.port(), withCert).build();
    ManagedChannel bad = Grpc.newChannelBuilder("localhost:" + running.port(), withoutCert).build();
    ManagedChannel plain = NettyChannelBuilder.forTarget(running.address()).usePlaintext().build();
    try {
      CallToolRequest request = CallToolRequest.newBuilder().setToolName("context").setCallId("t").build();
      assertEquals("t context true", ToolServiceGrpc.newBlockingStub(good).withDeadlineAfter(10, TimeUnit.SECONDS).callTool(request).getResult().getOutput());
      for (ManagedChannel refused : List.of(bad, plain)) {
        StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () ->
            ToolServiceGrpc.newBlockingStub(refused).withDeadlineAfter(5, TimeUnit.SECONDS).callTool(request));
        assertEquals(Status.Code.UNAVAILABLE, e.getStatus().getCode());
      }
    } finally {
      good.shutdownNow();
      bad.shutdownNow();
      plain.shutdownNow();
      running.stop();
    }
  }

  @Test
  void reflectionListsTheToolServiceAndHealth() throws Exception {
    ToolServer.Running running = new ToolServer("reflected").register(new Fixtures()).start(ServeOptions.defaults());
    try {
      Process grpcurl = new ProcessBuilder(ROOT.resolve(".tools/bin/grpcurl").toString(), "-plaintext", running.address(), "list").start();
      String listed = new String(grpcurl.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertEquals(0, grpcurl.waitFor());
      assertTrue(listed.contains("agentsidecar.v1.ToolService"), listed);
      assertTrue(listed.contains("grpc.health.v1.Health"), listed);
      assertTrue(listed.contains("grpc.reflection.v1.ServerReflection"), listed);
    } finally {
      running.stop();
    }
  }

  @Test
  void sigtermLetsARunningCallFinishRefusesNewCallsAndExitsZero() throws Exception {
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    Process server = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
        FixtureServer.class.getName(), "--port", "0", "--grace", "60").redirectErrorStream(false).start();
    ManagedChannel channel = null;
    try {
      BufferedReader out = new BufferedReader(new InputStreamReader(server.getInputStream(), StandardCharsets.UTF_8));
      CompletableFuture<String> line = CompletableFuture.supplyAsync(() -> {
        try {
          return out.readLine();
        } catch (java.io.IOException e) {
          return null;
        }
      });
      String listening = line.get(60, TimeUnit.SECONDS);
      assertTrue(listening != null && listening.startsWith("listening on 127.0.0.1:"), String.valueOf(listening));
      channel = NettyChannelBuilder.forTarget(listening.substring("listening on ".length())).usePlaintext().build();
      ToolServiceGrpc.ToolServiceBlockingStub stub = ToolServiceGrpc.newBlockingStub(channel).withDeadlineAfter(60, TimeUnit.SECONDS);
      Iterator<StreamToolResponse> held = stub.streamTool(StreamToolRequest.newBuilder()
          .setCall(CallToolRequest.newBuilder().setToolName("hold")).build());
      assertTrue(held.next().hasProgress());
      server.toHandle().destroy(); // SIGTERM; Process.destroy() would close our pipes too
      Status.Code refused = null;
      long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (refused == null && System.nanoTime() < end) {
        try {
          stub.callTool(CallToolRequest.newBuilder().setToolName("ping").build());
        } catch (StatusRuntimeException e) {
          refused = e.getStatus().getCode();
        }
      }
      assertEquals(Status.Code.UNAVAILABLE, refused);
      OutputStream stdin = server.getOutputStream();
      stdin.write("release\n".getBytes(StandardCharsets.UTF_8));
      stdin.flush();
      assertEquals("released", held.next().getResult().getOutput());
      assertTrue(server.waitFor(20, TimeUnit.SECONDS), "the server did not exit once its call had finished (its grace is a minute)");
      assertEquals(0, server.exitValue());
    } finally {
      if (channel != null) {
        channel.shutdownNow();
      }
      server.destroyForcibly();
    }
  }

  @Test
  void aBadFlagExitsTwoWithTheUsage() throws Exception {
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    Process server = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
        FixtureServer.class.getName(), "--port", "many").start();
    String err = new String(server.getErrorStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(server.waitFor(30, TimeUnit.SECONDS));
    assertEquals(2, server.exitValue());
    assertTrue(err.contains("--port \"many\" is not a number") && err.contains("--token-env NAME"), err);
  }
}
