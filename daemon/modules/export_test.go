package modules

// DevicesAttr is devicesAttr, for the tests.
var DevicesAttr = devicesAttr
