package main

// eventSource is the component the controller's events name
// (reportingController; "From" in kubectl describe): MetalLB's controller's,
// as the speaker's events name MetalLB's speaker ("metallb-speaker"), so
// that what MetalLB users grep and filter on keeps working
// (docs/migrating-from-metallb.md, "Events").
const eventSource = "metallb-controller"
