"""The ids every part of the package agrees on (tensor2tensor's convention).

0 pads a sequence (and starts the decoder's input), 1 ends it; vocabularies start at 2.
"""

PAD_ID = 0
EOS_ID = 1
