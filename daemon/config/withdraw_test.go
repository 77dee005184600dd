package config

import (
	"reflect"
	"testing"
)

func TestWithdrawRules(t *testing.T) {
	tos := func(n int) *int { return &n }
	mlx0, mlx1 := Selector{Device: Exact("mlx5_0")}, Selector{Device: Exact("mlx5_1")}
	rules := []RoCERule{
		{Selector: mlx0, Mode: RoCEv2},                          // every port
		{Selector: mlx0, Port: 2, TOS: tos(106)},                // port 2
		{Selector: mlx1, Port: 1, TOS: tos(7)},                  // another device
		{Selector: Selector{Driver: "mlx5_core"}, Mode: RoCEv1}, // another selector
	}
	for _, tc := range []struct {
		name  string
		port  int
		ports []int
		want  []RoCERule
	}{
		{"every port", 0, []int{1, 2}, []RoCERule{rules[2], rules[3]}},
		{"port 2: the rule for every port stays for port 1", 2, []int{1, 2}, []RoCERule{
			{Selector: mlx0, Port: 1, Mode: RoCEv2}, rules[2], rules[3]}},
		{"port 1 of three", 1, []int{1, 2, 3}, []RoCERule{
			{Selector: mlx0, Port: 2, Mode: RoCEv2}, {Selector: mlx0, Port: 3, Mode: RoCEv2}, rules[1], rules[2], rules[3]}},
		{"a port nothing declares alone", 3, []int{1, 2, 3}, []RoCERule{
			{Selector: mlx0, Port: 1, Mode: RoCEv2}, {Selector: mlx0, Port: 2, Mode: RoCEv2}, rules[1], rules[2], rules[3]}},
	} {
		got := WithdrawRoCE(rules, mlx0, tc.port, tc.ports)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
	if rules[0].Port != 0 {
		t.Errorf("WithdrawRoCE modified its argument: %+v", rules[0])
	}
	q := []QoSRule{{Selector: mlx0, Trust: TrustDSCP}, {Selector: mlx1, Port: 1, HasPFC: true, PFC: []uint8{3}}}
	if got := WithdrawQoS(q, mlx0, 0, nil); !reflect.DeepEqual(got, q[1:]) {
		t.Errorf("WithdrawQoS: %+v", got)
	}
}
