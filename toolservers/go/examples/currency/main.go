// The currency tool server: convert_currency at fixed example rates.
//
//	go run ./examples/currency --port 7004
package main

import (
	"context"
	"math"

	"github.com/agent-sidecar/agent-sidecar/toolservers/go/toolserver"
)

// usdPer is what one unit of each currency is worth in US dollars: fixed example rates,
// not market data.
var usdPer = map[string]float64{
	"USD": 1,
	"EUR": 1.08,
	"GBP": 1.27,
	"CHF": 1.12,
	"JPY": 0.0067,
}

type conversion struct {
	Amount float64 `json:"amount"`
	From   string  `json:"from"`
	To     string  `json:"to"`
}

type converted struct {
	Amount    float64 `json:"amount"`
	From      string  `json:"from"`
	To        string  `json:"to"`
	Converted float64 `json:"converted"`
	Rate      float64 `json:"rate"`
	Source    string  `json:"source"`
}

func convert(_ context.Context, in conversion) (converted, error) {
	rate := usdPer[in.From] / usdPer[in.To] // the schema's enum admits known codes only
	return converted{
		Amount:    in.Amount,
		From:      in.From,
		To:        in.To,
		Converted: math.Round(in.Amount*rate*100) / 100,
		Rate:      math.Round(rate*1e6) / 1e6,
		Source:    "example data (fixed rates)",
	}, nil
}

const schema = `{
  "type": "object",
  "properties": {
    "amount": {"type": "number", "minimum": 0, "description": "The amount to convert."},
    "from": {"type": "string", "enum": ["USD", "EUR", "GBP", "CHF", "JPY"], "description": "The currency of the amount (ISO 4217)."},
    "to": {"type": "string", "enum": ["USD", "EUR", "GBP", "CHF", "JPY"], "description": "The currency to convert to (ISO 4217)."}
  },
  "required": ["amount", "from", "to"],
  "additionalProperties": false
}`

func main() {
	server := toolserver.New("currency")
	server.MustRegister(toolserver.Tool{
		Name:        "convert_currency",
		Description: "Convert an amount of money from one currency to another, at fixed example rates.",
		InputSchema: schema,
		ReadOnly:    true,
		Idempotent:  true,
		Handler:     toolserver.Typed(convert),
	})
	server.Main()
}
