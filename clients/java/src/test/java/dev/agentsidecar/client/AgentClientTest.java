package dev.agentsidecar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Struct;
import com.google.protobuf.util.JsonFormat;
import dev.agentsidecar.v1.ApprovalRequired;
import dev.agentsidecar.v1.ListRunsResponse;
import dev.agentsidecar.v1.Run;
import dev.agentsidecar.v1.RunState;
import dev.agentsidecar.v1.RunResponse;
import dev.agentsidecar.v1.RunResult;
import dev.agentsidecar.v1.Session;
import dev.agentsidecar.v1.StopReason;
import dev.agentsidecar.v1.StreamRunResponse;
import dev.agentsidecar.v1.StreamRunResponse.EventCase;
import dev.agentsidecar.v1.ToolCallFinished;
import dev.agentsidecar.v1.ToolCallStatus;
import dev.agentsidecar.v1.Turn;
import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** AgentClient against a real sidecar, simulator and example tool servers. */
class AgentClientTest {
  @RegisterExtension static final SidecarStack STACK = new SidecarStack();

  private static final String ORDER_QUESTION =
      "What is the status of order 20250101, and where is its parcel?";
  private static final String SLOW = "a slow answer please";
  private static final String REFUND = "refund order 20250101 please, it arrived damaged";

  private static AgentClient connection;
  private static AgentClient client;

  @BeforeAll
  static void connect() {
    connection = AgentClient.connect(STACK.target());
    client = connection.withTimeout(Duration.ofSeconds(30));
  }

  @AfterAll
  static void disconnect() {
    connection.close();
  }

  private static String newSession() {
    return client.createSession("default").getSessionId();
  }

  @Test
  void aStreamedRunDeliversEveryEventInOrderAndEndsWithRunFinished() {
    String session = newSession();
    List<StreamRunResponse> events;
    try (RunStream stream = client.stream(session, ORDER_QUESTION)) {
      events = stream.stream().toList();
    }

    assertEquals(EventCase.RUN_STARTED, events.get(0).getEventCase());
    assertEquals(session, events.get(0).getRunStarted().getSessionId());
    StreamRunResponse last = events.get(events.size() - 1);
    assertEquals(EventCase.RUN_FINISHED, last.getEventCase());
    assertEquals(
        1, events.stream().filter(e -> e.getEventCase() == EventCase.RUN_FINISHED).count());
    for (int i = 0; i < events.size(); i++) {
      assertEquals(i + 1, events.get(i).getSequence(), "sequence numbers run from 1 without gaps");
      assertEquals(last.getRunId(), events.get(i).getRunId());
    }

    // Both tools are called in one step, and both succeed: each runs (finished OK) or is
    // answered from the sidecar's result cache (finished CACHED); either way it started first.
    List<ToolCallFinished> finished =
        events.stream().filter(StreamRunResponse::hasToolCallFinished)
            .map(StreamRunResponse::getToolCallFinished).toList();
    assertEquals(
        Set.of("get_order_status", "track_parcel"),
        finished.stream().map(ToolCallFinished::getToolName).collect(Collectors.toSet()));
    assertEquals(Set.of(1), finished.stream().map(f -> f.getStep()).collect(Collectors.toSet()));
    for (ToolCallFinished call : finished) {
      boolean started = events.stream().anyMatch(
          e -> e.hasToolCallStarted() && e.getToolCallStarted().getCallId().equals(call.getCallId()));
      assertTrue(started, call.getToolName() + " finished without starting");
      assertTrue(
          Set.of(ToolCallStatus.TOOL_CALL_STATUS_OK, ToolCallStatus.TOOL_CALL_STATUS_CACHED)
              .contains(call.getStatus()),
          call.getToolName() + ": " + call.getStatus());
    }
    assertEquals(
        finished.size(), events.stream().filter(StreamRunResponse::hasToolCallStarted).count(),
        "one tool_call_started per call");

    RunResult result = last.getRunFinished();
    assertEquals(StopReason.STOP_REASON_ANSWERED, result.getStopReason());
    assertTrue(result.getAnswer().startsWith("[simulated]"), result.getAnswer());
    assertEquals(2, result.getToolCalls());
    int answerStep = events.stream().filter(StreamRunResponse::hasTextDelta)
        .mapToInt(e -> e.getTextDelta().getStep()).max().orElseThrow();
    String streamed = events.stream().filter(StreamRunResponse::hasTextDelta)
        .filter(e -> e.getTextDelta().getStep() == answerStep)
        .map(e -> e.getTextDelta().getText()).collect(Collectors.joining());
    assertEquals(result.getAnswer(), streamed, "the answer step's deltas make up the answer");
  }

  @Test
  void aStreamedRunCanBeReadAsynchronously() throws Exception {
    String session = newSession();
    List<StreamRunResponse> events = Collections.synchronizedList(new ArrayList<>());
    RunResult result =
        client.streamAsync(session, ORDER_QUESTION, null, events::add).get(30, TimeUnit.SECONDS);

    assertEquals(StopReason.STOP_REASON_ANSWERED, result.getStopReason());
    assertEquals(EventCase.RUN_STARTED, events.get(0).getEventCase());
    assertEquals(result, events.get(events.size() - 1).getRunFinished());
  }

  @Test
  void aUnaryRunUnderTheStructuredProfileAnswersWithAJsonObject() throws Exception {
    Session session = client.createSession("structured");
    RunResponse reply = client.run(session.getSessionId(), "What is the status of order 20250101?");

    assertEquals(StopReason.STOP_REASON_ANSWERED, reply.getResult().getStopReason());
    Struct.Builder answer = Struct.newBuilder();
    JsonFormat.parser().merge(reply.getResult().getAnswer(), answer);
    assertTrue(answer.containsFields("answer"), reply.getResult().getAnswer());
    assertFalse(answer.getFieldsOrThrow("answer").getStringValue().isEmpty());
    // The session keeps the turn.
    List<Turn> turns = client.getSession(session.getSessionId()).getTurnsList();
    assertEquals(List.of(reply.getRunId()), turns.stream().map(Turn::getRunId).toList());
  }

  @Test
  void anAsynchronousUnaryRunCompletesWithItsResult() throws Exception {
    RunResponse reply =
        client.runAsync(newSession(), ORDER_QUESTION).get(30, TimeUnit.SECONDS);

    assertEquals(StopReason.STOP_REASON_ANSWERED, reply.getResult().getStopReason());
    assertEquals(2, reply.getResult().getToolCalls());
  }

  @Test
  void aDeadlineShorterThanTheAnswerEndsTheRunBeforeTheDeadline() {
    String session = newSession();
    // The model needs 3 s; the call allows 2.5 s. The sidecar fits the run into the caller's
    // deadline: it stops waiting for the model and returns the result while the call is still
    // alive (a reply after the deadline would have failed the call with DEADLINE_EXCEEDED).
    RunResponse reply = client.withTimeout(Duration.ofMillis(2500)).run(session, SLOW);

    assertEquals(StopReason.STOP_REASON_BUDGET_EXHAUSTED, reply.getResult().getStopReason());
    assertEquals("", reply.getResult().getAnswer());
    Turn turn = client.getSession(session).getTurns(0);
    assertEquals(StopReason.STOP_REASON_BUDGET_EXHAUSTED, turn.getStopReason());
  }

  @Test
  void aDeadlineThatPassesBeforeTheReplyFailsWithDeadlineExceeded() {
    ExecutionException failed =
        assertThrows(
            ExecutionException.class,
            () ->
                client.withTimeout(Duration.ofNanos(1))
                    .runAsync(newSession(), SLOW)
                    .get(10, TimeUnit.SECONDS));

    AgentSidecarException error = assertInstanceOf(AgentSidecarException.class, failed.getCause());
    assertEquals(Status.Code.DEADLINE_EXCEEDED, error.code());
    assertEquals("", error.reason(), "the client's own deadline carries no sidecar reason");
  }

  @Test
  void anUnknownSessionFailsWithTheReasonSessionNotFound() {
    String missing = "no-such-session-" + UUID.randomUUID();
    AgentSidecarException error =
        assertThrows(AgentSidecarException.class, () -> client.getSession(missing));

    assertEquals(Status.Code.NOT_FOUND, error.code());
    assertEquals(AgentSidecarException.SESSION_NOT_FOUND, error.reason(), error.getMessage());
    assertEquals(AgentSidecarException.DOMAIN, error.domain());
  }

  @Test
  void anApprovalHandlerLetsTheWaitingToolCallRun() {
    String session = newSession();
    List<ApprovalRequired> asked = Collections.synchronizedList(new ArrayList<>());
    List<StreamRunResponse> events;
    try (RunStream stream =
        client.stream(
            session,
            REFUND,
            request -> {
              asked.add(request);
              return Approval.approve();
            })) {
      events = stream.stream().toList();
    }

    assertEquals(1, asked.size());
    ApprovalRequired request = asked.get(0);
    assertEquals("refund_order", request.getToolName());
    int approvalAt = indexOf(events, EventCase.APPROVAL_REQUIRED);
    assertEquals(request, events.get(approvalAt).getApprovalRequired());
    int finishedAt = indexOf(events, EventCase.TOOL_CALL_FINISHED);
    assertTrue(finishedAt > approvalAt, "the call ends after the approval was asked for");
    ToolCallFinished call = events.get(finishedAt).getToolCallFinished();
    assertEquals(request.getCallId(), call.getCallId());
    assertEquals(ToolCallStatus.TOOL_CALL_STATUS_OK, call.getStatus());
    RunResult result = events.get(events.size() - 1).getRunFinished();
    assertTrue(result.getAnswer().contains("the refund was handled"), result.getAnswer());
  }

  @Test
  void aDenialSentWhileReadingTheStreamKeepsTheToolCallFromRunning() {
    String session = newSession();
    ToolCallFinished call = null;
    try (RunStream stream = client.stream(session, REFUND)) {
      for (StreamRunResponse event : stream) {
        if (event.hasApprovalRequired()) {
          client.deny(session, event.getApprovalRequired().getCallId(), "refunds need a manager");
        } else if (event.hasToolCallFinished()) {
          call = event.getToolCallFinished();
        }
      }
    }

    assertEquals("refund_order", call == null ? null : call.getToolName());
    assertEquals(ToolCallStatus.TOOL_CALL_STATUS_DENIED, call.getStatus());
  }

  @Test
  void approvingACallThatDoesNotWaitFailsWithNotFound() {
    AgentSidecarException error =
        assertThrows(
            AgentSidecarException.class, () -> client.approve(newSession(), "no-such-call"));

    assertEquals(Status.Code.NOT_FOUND, error.code());
  }

  @Test
  void cancellingAStreamedRunStopsItAndFreesTheSession() {
    String session = newSession();
    RunStream stream = client.stream(session, SLOW);
    var events = stream.iterator();
    assertEquals(EventCase.RUN_STARTED, events.next().getEventCase());

    stream.cancel();

    assertThrows(CancellationException.class, () -> {
      while (events.hasNext()) {
        events.next();
      }
    });
    assertTrue(stream.isCancelled());
    assertTheTurnWasCancelledAndTheSessionAnswersAgain(session);
  }

  @Test
  void cancellingTheFutureOfAnAsynchronousRunStopsIt() throws Exception {
    String session = newSession();
    CompletableFuture<Void> started = new CompletableFuture<>();
    CompletableFuture<RunResult> run =
        client.streamAsync(
            session,
            SLOW,
            null,
            event -> {
              if (event.hasRunStarted()) {
                started.complete(null);
              }
            });
    started.get(10, TimeUnit.SECONDS);

    assertTrue(run.cancel(true));

    assertThrows(CancellationException.class, run::join);
    assertTheTurnWasCancelledAndTheSessionAnswersAgain(session);
  }

  private static void assertTheTurnWasCancelledAndTheSessionAnswersAgain(String session) {
    // The sidecar records the cancelled turn when it has stopped the run and freed the session.
    Turn turn =
        Eventually.get(
            Duration.ofSeconds(10),
            () -> {
              List<Turn> turns = client.getSession(session).getTurnsList();
              return turns.isEmpty() ? null : turns.get(0);
            });
    assertEquals(StopReason.STOP_REASON_CANCELLED, turn.getStopReason());

    RunResponse again = client.run(session, "What is the status of order 20250101?");
    assertEquals(StopReason.STOP_REASON_ANSWERED, again.getResult().getStopReason());
  }

  private static int indexOf(List<StreamRunResponse> events, EventCase kind) {
    for (int i = 0; i < events.size(); i++) {
      if (events.get(i).getEventCase() == kind) {
        return i;
      }
    }
    throw new AssertionError("no " + kind + " in " + events);
  }

  @Test
  void aBackgroundRunIsWatchedAgainFromWhereItsWatcherLeftOff() {
    String sessionId = client.createSession("default").getSessionId();
    Run run = client.startRun(sessionId, ORDER_QUESTION);
    assertEquals(RunState.RUN_STATE_SUBMITTED, run.getState());
    List<StreamRunResponse> seen = new ArrayList<>();
    try (RunWatch events = client.watchRun(run.getRunId(), 0)) {
      for (StreamRunResponse event : events) {
        seen.add(event);
        if (seen.size() == 2) {
          break; // the watcher leaves; the run goes on
        }
      }
    }
    try (RunWatch events = client.watchRun(run.getRunId(), seen.get(seen.size() - 1).getSequence())) {
      events.forEach(seen::add);
    }
    for (int i = 0; i < seen.size(); i++) {
      assertEquals(i + 1, seen.get(i).getSequence(), "an event missed or seen twice");
    }
    StreamRunResponse last = seen.get(seen.size() - 1);
    assertTrue(seen.get(0).hasRunStarted() && last.hasRunFinished());
    Run done = client.getRun(run.getRunId());
    assertEquals(RunState.RUN_STATE_COMPLETED, done.getState());
    assertEquals(last.getRunFinished().getAnswer(), done.getResult().getAnswer());
    ListRunsResponse listed = client.listRuns(sessionId, 0, "");
    assertEquals(List.of(run.getRunId()), listed.getRunsList().stream().map(Run::getRunId).toList());
    assertEquals("", listed.getNextPageToken());
  }

  @Test
  void cancellingABackgroundRunStopsItAndIsSafeToRetry() {
    String sessionId = client.createSession("default").getSessionId();
    Run run = client.startRun(sessionId, "slow answer");
    Run cancelled = client.cancelRun(run.getRunId());
    assertEquals(RunState.RUN_STATE_CANCELED, cancelled.getState());
    assertEquals("cancelled", cancelled.getResult().getError().getCode());
    assertEquals(RunState.RUN_STATE_CANCELED, client.cancelRun(run.getRunId()).getState());
  }

  @Test
  void anUnknownRunIsRunNotFoundForEveryCall() {
    for (Runnable call :
        List.<Runnable>of(
            () -> client.getRun("no-such-run"),
            () -> client.cancelRun("no-such-run"),
            () -> {
              try (RunWatch events = client.watchRun("no-such-run", 0)) {
                events.iterator().hasNext();
              }
            })) {
      AgentSidecarException e = assertThrows(AgentSidecarException.class, call::run);
      assertEquals(Status.Code.NOT_FOUND, e.code());
      assertTrue(e.hasReason(AgentSidecarException.RUN_NOT_FOUND));
    }
  }
}
