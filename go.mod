module github.com/kvready/kvready

go 1.26

require (
	github.com/NVIDIA/go-nvml v0.13.4-1 // indirect
	github.com/ebitengine/purego v0.11.3 // indirect
	github.com/looplab/fsm v1.0.3 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
