package dev.agentsidecar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.BadRequest;
import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import com.google.rpc.ResourceInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** How a status and its google.rpc details, as they come off the wire, become the exception. */
class AgentSidecarExceptionTest {
  @Test
  void theDetailsOfAStatusBecomeTheExceptionsFields() {
    com.google.rpc.Status status =
        com.google.rpc.Status.newBuilder()
            .setCode(Code.FAILED_PRECONDITION_VALUE)
            .setMessage("session 's1' is already running a turn")
            .addDetails(Any.pack(ErrorInfo.newBuilder()
                .setReason(AgentSidecarException.SESSION_BUSY)
                .setDomain(AgentSidecarException.DOMAIN)
                .putMetadata("session_id", "s1")
                .build()))
            .addDetails(Any.pack(RetryInfo.newBuilder()
                .setRetryDelay(com.google.protobuf.Duration.newBuilder().setSeconds(1).setNanos(500_000_000))
                .build()))
            .addDetails(Any.pack(ResourceInfo.newBuilder()
                .setResourceType("agentsidecar.v1.Session").setResourceName("s1").build()))
            .addDetails(Any.pack(BadRequest.newBuilder()
                .addFieldViolations(BadRequest.FieldViolation.newBuilder()
                    .setField("input").setDescription("must not be empty"))
                .build()))
            .build();

    AgentSidecarException error = AgentSidecarException.from(StatusProto.toStatusRuntimeException(status));

    assertEquals(Status.Code.FAILED_PRECONDITION, error.code());
    assertEquals(AgentSidecarException.SESSION_BUSY, error.reason());
    assertTrue(error.hasReason(AgentSidecarException.SESSION_BUSY));
    assertEquals(AgentSidecarException.DOMAIN, error.domain());
    assertEquals(Map.of("session_id", "s1"), error.metadata());
    assertEquals(Duration.ofMillis(1500), error.retryDelay().orElseThrow());
    assertEquals("s1", error.resourceInfo().orElseThrow().getResourceName());
    assertEquals("input", error.fieldViolations().get(0).getField());
    assertEquals("session 's1' is already running a turn", error.description());
    assertEquals(
        "FAILED_PRECONDITION SESSION_BUSY: session 's1' is already running a turn",
        error.getMessage());
    assertEquals(status, error.details().orElseThrow());
  }

  @Test
  void aStatusWithoutDetailsKeepsItsCodeAndHasNoReason() {
    AgentSidecarException error =
        AgentSidecarException.from(Status.UNAVAILABLE.withDescription("connection refused").asRuntimeException());

    assertEquals(Status.Code.UNAVAILABLE, error.code());
    assertEquals("", error.reason());
    assertFalse(error.hasReason(""));
    assertTrue(error.retryDelay().isEmpty());
    assertTrue(error.fieldViolations().isEmpty());
    assertTrue(error.resourceInfo().isEmpty());
    assertTrue(error.details().isEmpty());
    assertEquals("UNAVAILABLE: connection refused", error.getMessage());
  }

  @Test
  void anExceptionAlreadyInTheCauseChainIsKept() {
    AgentSidecarException inner =
        AgentSidecarException.from(Status.NOT_FOUND.asRuntimeException());
    StatusRuntimeException outer = Status.CANCELLED.withCause(inner).asRuntimeException();

    assertSame(inner, AgentSidecarException.from(outer));
  }
}
