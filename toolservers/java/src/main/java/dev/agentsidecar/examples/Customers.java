package dev.agentsidecar.examples;

import dev.agentsidecar.toolserver.Arg;
import dev.agentsidecar.toolserver.Tool;
import dev.agentsidecar.toolserver.ToolServer;

/** A tool server in ten lines: {@code mvn -q compile exec:java -Dexec.args="--port 7006"}. */
public final class Customers {
  public record Customer(String customerId, String name, String tier, boolean exampleData) {}

  @Tool(name = "lookup_customer", description = "Look up a customer by id: name and loyalty tier (example data).", readOnly = true, idempotent = true)
  public Customer lookupCustomer(@Arg(name = "customer_id", description = "e.g. C-1001") String customerId) {
    String tier = switch (Math.floorMod(customerId.hashCode(), 3)) { case 0 -> "gold"; case 1 -> "silver"; default -> "bronze"; };
    return new Customer(customerId, "Customer " + customerId, tier, true);
  }

  public static void main(String[] args) {
    new ToolServer("customers").register(new Customers()).main(args);
  }
}
