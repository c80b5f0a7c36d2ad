package dev.agentsidecar.toolserver;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.agentsidecar.v1.CallToolRequest;
import dev.agentsidecar.v1.ListToolsRequest;
import dev.agentsidecar.v1.ListToolsResponse;
import dev.agentsidecar.v1.StreamToolRequest;
import dev.agentsidecar.v1.StreamToolResponse;
import dev.agentsidecar.v1.ToolDescriptor;
import dev.agentsidecar.v1.ToolErrorKind;
import dev.agentsidecar.v1.ToolResult;
import dev.agentsidecar.v1.ToolServiceGrpc;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse;
import io.grpc.health.v1.HealthGrpc;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.MetadataUtils;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Real servers on 127.0.0.1, called through the generated stubs over real gRPC. */
class ToolServerTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static ToolServer.Running running;
  private static ManagedChannel channel;
  private static ToolServiceGrpc.ToolServiceBlockingStub tools;

  @BeforeAll
  static void start() {
    running = new ToolServer("fixtures", "test").register(new Fixtures()).start(ServeOptions.defaults());
    channel = NettyChannelBuilder.forTarget(running.address()).usePlaintext().build();
    tools = ToolServiceGrpc.newBlockingStub(channel);
  }

  @AfterAll
  static void stop() {
    channel.shutdownNow();
    running.stop();
  }

  private static ToolResult call(String tool, String arguments) {
    return tools.withDeadlineAfter(10, TimeUnit.SECONDS)
        .callTool(CallToolRequest.newBuilder().setCallId("c1").setToolName(tool).setArguments(arguments).build())
        .getResult();
  }

  private static Status.Code failure(Runnable call) {
    return assertThrows(StatusRuntimeException.class, call::run).getStatus().getCode();
  }

  @Test
  void aCallReturnsTheOutputAsJsonAndEchoesTheCallId() throws Exception {
    ToolResult result = call("reserve", "{\"sku\": \"X-100\", \"quantity\": 2}");
    assertEquals("c1", result.getCallId());
    assertEquals(JSON.readTree("{\"sku\": \"X-100\", \"reserved\": 2}"), JSON.readTree(result.getOutput()));
    assertTrue(result.getHandlerDuration().getNanos() > 0 || result.getHandlerDuration().getSeconds() > 0);
  }

  @Test
  void largeIntegersSurviveTheRoundTripExactly() {
    assertEquals("123456789012345678901234567890", call("echo_int", "{\"value\": 123456789012345678901234567890}").getOutput());
  }

  @Test
  void recordsListsEnumsAndOptionalsBindFromTheArguments() throws Exception {
    ToolResult result = call("order", "{\"lines\": [{\"sku\": \"A\", \"quantity\": 2}, {\"sku\": \"B\", \"quantity\": 3}], \"priority\": \"HIGH\"}");
    assertEquals(JSON.readTree("{\"lines\": 2, \"units\": 5, \"priority\": \"HIGH\"}"), JSON.readTree(result.getOutput()));
    ToolResult defaulted = call("order", "{\"lines\": []}");
    assertEquals("LOW", JSON.readTree(defaulted.getOutput()).get("priority").asText());
  }

  @Test
  void argumentsViolatingTheSchemaAreAResultNamingEachFieldAndTheToolNeverRuns() {
    int runs = Fixtures.reserveRuns;
    ToolResult result = call("reserve", "{\"quantity\": \"two\", \"colour\": \"red\"}");
    assertEquals(ToolErrorKind.TOOL_ERROR_KIND_INVALID_ARGUMENTS, result.getError().getKind());
    String message = result.getError().getMessage();
    assertTrue(message.startsWith("Invalid arguments for reserve:\n"), message);
    assertTrue(message.contains("- sku: required argument is missing; expected string"), message);
    assertTrue(message.contains("- colour: unknown argument; reserve takes: sku, quantity"), message);
    assertTrue(message.contains("- quantity: ") && message.contains("; got \"two\""), message);
    assertTrue(message.endsWith("Call reserve again with corrected arguments."), message);
    assertEquals(runs, Fixtures.reserveRuns);
  }

  @Test
  void nestedArgumentErrorsNameThePath() {
    String message = call("order", "{\"lines\": [{\"sku\": \"A\"}], \"priority\": \"URGENT\"}").getError().getMessage();
    assertTrue(message.contains("- lines[0].quantity: required field is missing"), message);
    assertTrue(message.contains("- priority: ") && message.contains("got \"URGENT\""), message);
  }

  @Test
  void argumentsThatAreNotAJsonObjectFailWithInvalidArgument() {
    for (String text : List.of("[1]", "null", "{broken", "12")) {
      assertEquals(Status.Code.INVALID_ARGUMENT, failure(() -> call("reserve", text)), text);
    }
  }

  @Test
  void anUnknownToolIsNotFoundListingTheToolsAndAnEmptyNameIsInvalid() {
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> call("nope", "{}"));
    assertEquals(Status.Code.NOT_FOUND, e.getStatus().getCode());
    assertTrue(e.getStatus().getDescription().contains("this server offers: context, count, echo_int"), e.getStatus().getDescription());
    assertEquals(Status.Code.INVALID_ARGUMENT, failure(() -> call("", "{}")));
  }

  @Test
  void anExceptionIsAnExecutionFailedResultAndAToolFailureKeepsItsMessage() {
    ToolResult thrown = call("explode", "{}");
    assertEquals(ToolErrorKind.TOOL_ERROR_KIND_EXECUTION_FAILED, thrown.getError().getKind());
    assertEquals("IllegalStateException: the value is out of range", thrown.getError().getMessage());
    ToolResult failed = call("reserve", "{\"sku\": \"A\", \"quantity\": 0}");
    assertEquals("reserve at least one unit", failed.getError().getMessage());
  }

  @Test
  void aPassedDeadlineFailsTheCallAndInterruptsTheTool() throws Exception {
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () ->
        tools.withDeadlineAfter(300, TimeUnit.MILLISECONDS)
            .callTool(CallToolRequest.newBuilder().setToolName("hold").setArguments("{\"key\": \"deadline\"}").build()));
    assertEquals(Status.Code.DEADLINE_EXCEEDED, e.getStatus().getCode());
    assertTrue(Fixtures.latch(Fixtures.INTERRUPTED, "deadline").await(10, TimeUnit.SECONDS));
  }

  @Test
  void aCallerCancellingInterruptsTheTool() throws Exception {
    ToolServiceGrpc.ToolServiceStub async = ToolServiceGrpc.newStub(channel);
    io.grpc.Context.CancellableContext context = io.grpc.Context.current().withCancellation();
    context.run(() -> async.callTool(CallToolRequest.newBuilder().setToolName("hold").setArguments("{\"key\": \"cancel\"}").build(),
        new io.grpc.stub.StreamObserver<>() {
          public void onNext(dev.agentsidecar.v1.CallToolResponse value) {}
          public void onError(Throwable t) {}
          public void onCompleted() {}
        }));
    assertTrue(Fixtures.latch(Fixtures.STARTED, "cancel").await(10, TimeUnit.SECONDS));
    context.cancel(null);
    assertTrue(Fixtures.latch(Fixtures.INTERRUPTED, "cancel").await(10, TimeUnit.SECONDS));
  }

  @Test
  void streamToolSendsProgressThenExactlyOneResult() {
    Iterator<StreamToolResponse> stream = tools.withDeadlineAfter(10, TimeUnit.SECONDS).streamTool(StreamToolRequest.newBuilder()
        .setCall(CallToolRequest.newBuilder().setToolName("count").setArguments("{\"to\": 3}")).build());
    List<StreamToolResponse> messages = new ArrayList<>();
    stream.forEachRemaining(messages::add);
    assertEquals(4, messages.size());
    assertEquals("2 of 3", messages.get(1).getProgress().getMessage());
    assertEquals("counted to 3", messages.get(3).getResult().getOutput());
    assertEquals("counted to 3", call("count", "{\"to\": 3}").getOutput()); // progress dropped on CallTool
  }

  @Test
  void theContextHasTheCallIdToolNameDeadlineAndMetadata() {
    Metadata metadata = new Metadata();
    metadata.put(Metadata.Key.of("x-tenant", Metadata.ASCII_STRING_MARSHALLER), "acme");
    String output = tools.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(metadata))
        .withDeadlineAfter(10, TimeUnit.SECONDS)
        .callTool(CallToolRequest.newBuilder().setCallId("ctx-1").setToolName("context").build())
        .getResult().getOutput();
    assertEquals("ctx-1 context true", output);
    assertEquals("acme", Fixtures.lastContext.metadata().get(Metadata.Key.of("x-tenant", Metadata.ASCII_STRING_MARSHALLER)));
  }

  @Test
  void listToolsReportsSchemasFromTheTypesAndEveryFact() throws Exception {
    ListToolsResponse list = tools.listTools(ListToolsRequest.getDefaultInstance());
    assertTrue(list.getToolSetVersion().matches("[0-9a-f]{16}"));
    ToolDescriptor order = list.getToolsList().stream().filter(t -> t.getName().equals("order")).findFirst().orElseThrow();
    JsonNode input = JSON.readTree(order.getInputSchema());
    assertEquals(JSON.readTree("""
        {"type": "object", "properties": {
           "lines": {"type": "array", "items": {"type": "object", "properties": {
              "sku": {"type": "string", "description": "The SKU"}, "quantity": {"type": "integer"}},
              "required": ["sku", "quantity"], "additionalProperties": false}},
           "priority": {"type": "string", "enum": ["LOW", "HIGH"]}},
         "required": ["lines"], "additionalProperties": false}"""), input);
    assertEquals("object", JSON.readTree(order.getOutputSchema()).get("type").asText());
    ToolDescriptor hold = list.getToolsList().stream().filter(t -> t.getName().equals("hold")).findFirst().orElseThrow();
    assertTrue(hold.getReadOnly());
    assertEquals(30, hold.getCacheTtl().getSeconds());
    assertEquals(2, hold.getDefaultTimeout().getSeconds());
    assertEquals(500_000_000, hold.getDefaultTimeout().getNanos());
    assertEquals("", hold.getOutputSchema());
    ToolDescriptor reserve = list.getToolsList().stream().filter(t -> t.getName().equals("reserve")).findFirst().orElseThrow();
    assertEquals(List.of("sku:{sku}"), reserve.getWriteKeysList());
    assertTrue(reserve.getIdempotent());
    assertFalse(reserve.getReadOnly() || reserve.getDestructive() || reserve.getRequiresApproval());
    assertEquals("test", reserve.getVersion());
  }

  @Test
  void healthIsServingForTheServerAndTheToolService() {
    HealthGrpc.HealthBlockingStub health = HealthGrpc.newBlockingStub(channel);
    for (String service : List.of("", "agentsidecar.v1.ToolService")) {
      assertEquals(HealthCheckResponse.ServingStatus.SERVING,
          health.check(HealthCheckRequest.newBuilder().setService(service).build()).getStatus());
    }
  }

  public static final class Mistakes {
    @Tool(name = "bad name", description = "x")
    public String badName() { return ""; }
  }

  public static final class NoDescription {
    @Tool(description = " ")
    public String t() { return ""; }
  }

  public static final class CachedWriter {
    @Tool(description = "x", cacheTtlSeconds = 5)
    public String t() { return ""; }
  }

  public static final class BadKey {
    @Tool(description = "x", readKeys = "sku:{id}")
    public String t(String sku) { return ""; }
  }

  public static final class BadType {
    @Tool(description = "x")
    public String t(Object anything) { return ""; }
  }

  public static final class Nothing {
    public String t() { return ""; }
  }

  @Test
  void declarationMistakesAreRefusedWithHelpfulErrors() {
    record Case(Object tools, String message) {}
    for (Case c : List.of(
        new Case(new Mistakes(), "invalid name; use 1 to 64 characters"),
        new Case(new NoDescription(), "no description"),
        new Case(new CachedWriter(), "cacheTtlSeconds needs readOnly = true"),
        new Case(new BadKey(), "uses {id}, but a placeholder must name a top-level argument, one of [sku]"),
        new Case(new BadType(), "type java.lang.Object has no JSON Schema here"),
        new Case(new Nothing(), "has no public method annotated @Tool"))) {
      ToolDefinitionException e = assertThrows(ToolDefinitionException.class, () -> new ToolServer("s").register(c.tools()));
      assertTrue(e.getMessage().contains(c.message()), e.getMessage());
      assertTrue(e instanceof ToolServerException);
    }
    ToolServer twice = new ToolServer("twice").register(new Fixtures());
    assertTrue(assertThrows(ToolDefinitionException.class, () -> twice.register(new Fixtures())).getMessage()
        .contains("already registered"));
  }

  @Test
  void aConfiguredTokenIsRequiredOnToolCallsWhileHealthStaysOpen() {
    ToolServer.Running secured = new ToolServer("secured").register(new Fixtures()).start(ServeOptions.defaults().withToken("s3cret"));
    ManagedChannel plain = NettyChannelBuilder.forTarget(secured.address()).usePlaintext().build();
    try {
      ToolServiceGrpc.ToolServiceBlockingStub stub = ToolServiceGrpc.newBlockingStub(plain).withDeadlineAfter(10, TimeUnit.SECONDS);
      CallToolRequest request = CallToolRequest.newBuilder().setToolName("context").build();
      assertEquals(Status.Code.UNAUTHENTICATED, failure(() -> stub.callTool(request)));
      Metadata token = new Metadata();
      token.put(Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER), "Bearer s3cret");
      assertTrue(stub.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(token)).callTool(request).getResult().hasOutput());
      assertEquals(HealthCheckResponse.ServingStatus.SERVING,
          HealthGrpc.newBlockingStub(plain).check(HealthCheckRequest.getDefaultInstance()).getStatus());
    } finally {
      plain.shutdownNow();
      secured.stop();
    }
  }

  @Test
  void aDrainRefusesNewCallsTurnsHealthNotServingAndLetsARunningCallFinish() throws Exception {
    ToolServer.Running draining = new ToolServer("draining").register(new Fixtures()).start(ServeOptions.defaults());
    ManagedChannel plain = NettyChannelBuilder.forTarget(draining.address()).usePlaintext().build();
    try {
      ToolServiceGrpc.ToolServiceBlockingStub stub = ToolServiceGrpc.newBlockingStub(plain).withDeadlineAfter(30, TimeUnit.SECONDS);
      CompletableFuture<String> held = CompletableFuture.supplyAsync(() ->
          stub.callTool(CallToolRequest.newBuilder().setToolName("hold").setArguments("{\"key\": \"drain\"}").build()).getResult().getOutput());
      assertTrue(Fixtures.latch(Fixtures.STARTED, "drain").await(10, TimeUnit.SECONDS));
      Iterator<HealthCheckResponse> watch = HealthGrpc.newBlockingStub(plain).watch(HealthCheckRequest.getDefaultInstance());
      assertEquals(HealthCheckResponse.ServingStatus.SERVING, watch.next().getStatus());
      CompletableFuture<Void> drained = CompletableFuture.runAsync(() -> {
        try {
          draining.drain(Duration.ofSeconds(60));
        } catch (InterruptedException e) {
          throw new IllegalStateException(e);
        }
      });
      assertEquals(HealthCheckResponse.ServingStatus.NOT_SERVING, watch.next().getStatus());
      StatusRuntimeException refused = assertThrows(StatusRuntimeException.class, () ->
          stub.callTool(CallToolRequest.newBuilder().setToolName("count").setArguments("{\"to\": 1}").build()));
      assertEquals(Status.Code.UNAVAILABLE, refused.getStatus().getCode());
      Fixtures.latch(Fixtures.RELEASE, "drain").countDown();
      assertEquals("released drain", held.get(10, TimeUnit.SECONDS));
      drained.get(10, TimeUnit.SECONDS); // long before its minute of grace
    } finally {
      plain.shutdownNow();
      draining.stop();
    }
  }

  @Test
  void callsStillRunningWhenTheGraceEndsAreInterrupted() throws Exception {
    ToolServer.Running draining = new ToolServer("late").register(new Fixtures()).start(ServeOptions.defaults());
    ManagedChannel plain = NettyChannelBuilder.forTarget(draining.address()).usePlaintext().build();
    try {
      ToolServiceGrpc.ToolServiceBlockingStub stub = ToolServiceGrpc.newBlockingStub(plain).withDeadlineAfter(30, TimeUnit.SECONDS);
      CompletableFuture<Status.Code> held = CompletableFuture.supplyAsync(() -> failure(() ->
          stub.callTool(CallToolRequest.newBuilder().setToolName("hold").setArguments("{\"key\": \"late\"}").build())));
      assertTrue(Fixtures.latch(Fixtures.STARTED, "late").await(10, TimeUnit.SECONDS));
      draining.drain(Duration.ofMillis(200));
      assertTrue(Fixtures.latch(Fixtures.INTERRUPTED, "late").await(10, TimeUnit.SECONDS));
      assertTrue(List.of(Status.Code.CANCELLED, Status.Code.UNAVAILABLE).contains(held.get(10, TimeUnit.SECONDS)));
    } finally {
      plain.shutdownNow();
      draining.stop();
    }
  }

  @Test
  void badServeOptionsAreRefusedNamingTheFlag() {
    assertTrue(assertThrows(IllegalArgumentException.class, () -> ServeOptions.parse(new String[] {"--tls-cert", "a.pem"}, java.util.Map.of()))
        .getMessage().contains("--tls-cert and --tls-key go together"));
    assertTrue(assertThrows(IllegalArgumentException.class, () -> ServeOptions.parse(new String[] {"--token-env", "NOPE"}, java.util.Map.of()))
        .getMessage().contains("the variable is unset or empty"));
    assertEquals("s", ServeOptions.parse(new String[] {"--token-env", "T", "--port", "7"}, java.util.Map.of("T", " s ")).token());
  }
}
