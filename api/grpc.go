package api

import "github.com/chunkd/chunkd/addr"

// MaxGRPCMessage is the message size both ends of the gRPC service
// chunkd.v1.ChunkCache should accept: a chunk of MaxFrameLen bytes and room
// for the rest of its message. gRPC's default limit of 4 MiB is too small for
// the largest chunks, so pass it as grpc.MaxRecvMsgSize and
// grpc.MaxSendMsgSize to the server, and as grpc.MaxCallRecvMsgSize to the
// client's calls (grpc.WithDefaultCallOptions).
const MaxGRPCMessage = MaxFrameLen + 64<<10

// MaxGRPCRequest is the largest request the service accepts (pass it as
// grpc.MaxRecvMsgSize): a batch of MaxBatch addresses, each 20 bytes plus
// its protobuf framing, and 64 KiB for the database name and the rest. A
// larger request is refused before it is decoded.
const MaxGRPCRequest = MaxBatch*(addr.Size+4) + 64<<10
