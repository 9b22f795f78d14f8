"""What the emulated engines (parameter server, all-reduce) share.

  link.py     network interfaces and real transfers paced in real time
  wire.py     a worker's variables as one vector on the wire
  workers.py  the workers' gradient programs (the shared loss code) and
              their memory check
  threads.py  the engines' threads: failures reach the loop, close joins
"""
